/*
 * A hostile peer written on plain libucp — no tagspace in it. It connects to a listener like
 * any UCX client and sends what an attacker (or a careless library) could send. Used by
 * adapter-ucx/tests/hostile_peer.rs; built there with the system compiler against the system's
 * UCX headers (pkg-config ucx).
 *
 *   hostile_peer IP PORT am ID[,ID...]   one 8-byte Active Message on each id, with and without
 *                                        the reply flag
 *   hostile_peer IP PORT tags N SEED     N eager tag messages with random 64-bit tags
 *   hostile_peer IP PORT forge BASE SHIFT FIRST COUNT COPIES G[,G...] [SIZE]
 *                                        forged copies of an honest pair's tags: for each
 *                                        guessed pair value G, COPIES times, the tags
 *                                        BASE | G << SHIFT | p for p in FIRST..FIRST+COUNT,
 *                                        each "FORGED!!" padded to SIZE bytes (default 8,
 *                                        at most 65536; never a handshake)
 *   hostile_peer IP PORT mix MS SEED BASE PAIRMASK RATE
 *                                        for MS milliseconds, eager tag messages from one
 *                                        splitmix stream r: even ones the random tag r, odd
 *                                        ones BASE | (r & PAIRMASK) | (r >> 48) % 1000 (a
 *                                        registered namespace, a guessed pair value, a small
 *                                        payload), at most RATE a second (0: as fast as
 *                                        UCX sends them); prints how many it sent
 *   hostile_peer IP PORT churn N         N times: connect, wait until wired up, close at once
 *   hostile_peer IP PORT early N ID      at once after connecting, N 16-byte AMs on id ID (the
 *                                        victim's control id), before anything else
 *   hostile_peer IP PORT flood N ID      once wired up, N 8-byte AMs on id ID with the reply
 *                                        flag, as fast as UCX takes them (the victim may cut
 *                                        the connection: sends then fail, which is expected)
 *   hostile_peer IP PORT frames ID MS HEX[,HEX...]
 *                                        once wired up, each hex string as one AM on id ID (the
 *                                        victim's control id: crafted control frames), then
 *                                        stays connected, progressing, for MS milliseconds
 *
 * Exits 0 once everything it sent has completed locally, 1 on a UCX error (printed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <ucp/api/ucp.h>

static ucp_worker_h worker;

static int wait_req(ucs_status_ptr_t r, const char *what)
{
    ucs_status_t s;
    if (r == NULL) {
        return 0;
    }
    if (UCS_PTR_IS_ERR(r)) {
        fprintf(stderr, "hostile_peer: %s: %s\n", what, ucs_status_string(UCS_PTR_STATUS(r)));
        return 1;
    }
    do {
        ucp_worker_progress(worker);
        s = ucp_request_check_status(r);
    } while (s == UCS_INPROGRESS);
    ucp_request_free(r);
    if (s != UCS_OK) {
        fprintf(stderr, "hostile_peer: %s: %s\n", what, ucs_status_string(s));
        return 1;
    }
    return 0;
}

static ucs_status_t ignore_am(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg; (void)header; (void)header_length; (void)data; (void)length; (void)param;
    return UCS_OK;
}

/* The victim answers with its own control frames (AMs). UCX 1.12/1.13 crash on an AM to an id
 * whose handler slot was never initialised — even this attacker would — so it handles every
 * id, highest first (which sizes UCX's table once), and ignores what arrives. */
static void handle_every_am_id(void)
{
    ucp_am_handler_param_t hp;
    unsigned id;
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    hp.cb         = ignore_am;
    for (id = 0; id <= 0xffff; id++) {
        hp.id = (id == 0) ? 0xffff : id - 1;
        ucp_worker_set_am_recv_handler(worker, &hp);
    }
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Closes the endpoint at once (no goodbye to the victim, which may have cut it already), tears
 * down, and returns rc. */
static int leave(ucp_ep_h ep, ucp_context_h ctx, int rc)
{
    ucp_request_param_t rp;
    memset(&rp, 0, sizeof(rp));
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    (void)wait_req(ucp_ep_close_nbx(ep, &rp), "close");
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    return rc;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Decodes hex into a new buffer; returns its length, or -1 on a bad digit. */
static long unhex(const char *hex, unsigned char **out)
{
    size_t n = strlen(hex) / 2, i;
    *out = malloc(n + 1);
    for (i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
            free(*out);
            return -1;
        }
        (*out)[i] = (unsigned char)v;
    }
    return (long)n;
}

int main(int argc, char **argv)
{
    ucp_params_t params;
    ucp_worker_params_t wparams;
    ucp_ep_params_t ep_params;
    ucp_request_param_t rp;
    ucp_context_h ctx;
    ucp_ep_h ep;
    struct sockaddr_in sa;
    uint64_t payload = 0x686f7374696c6521ull; /* "hostile!" */
    int rc = 0;

    if (argc < 5) {
        fprintf(stderr, "usage: hostile_peer IP PORT am ID[,ID...] | tags N SEED\n");
        return 2;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port   = htons((uint16_t)atoi(argv[2]));
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
        fprintf(stderr, "hostile_peer: bad IP %s\n", argv[1]);
        return 2;
    }

    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features   = UCP_FEATURE_AM | UCP_FEATURE_TAG;
    if (ucp_init(&params, NULL, &ctx) != UCS_OK) {
        fprintf(stderr, "hostile_peer: ucp_init failed\n");
        return 1;
    }
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (ucp_worker_create(ctx, &wparams, &worker) != UCS_OK) {
        fprintf(stderr, "hostile_peer: ucp_worker_create failed\n");
        return 1;
    }
    handle_every_am_id();
    memset(&ep_params, 0, sizeof(ep_params));
    /* Peer error handling, as tagspace uses: UCX refuses a connection whose two sides differ. */
    ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.err_mode         = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.flags            = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr    = (struct sockaddr *)&sa;
    ep_params.sockaddr.addrlen = sizeof(sa);
    if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) {
        fprintf(stderr, "hostile_peer: ucp_ep_create failed\n");
        return 1;
    }
    if (strcmp(argv[3], "early") == 0 && argc >= 6) {
        /* Posted all at once, before this side waits for anything: they reach the victim while
         * its own endpoint may still be wiring up. Over TCP (no #6872 there). */
        long n = atol(argv[4]), i;
        unsigned id = (unsigned)strtoul(argv[5], NULL, 0);
        uint64_t frame[2] = {payload, payload};
        ucs_status_ptr_t *reqs = calloc((size_t)n, sizeof(*reqs));
        for (i = 0; i < n; i++) {
            memset(&rp, 0, sizeof(rp));
            rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            rp.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
            reqs[i] = ucp_am_send_nbx(ep, id, NULL, 0, frame, sizeof(frame), &rp);
        }
        for (i = 0; i < n; i++) {
            (void)wait_req(reqs[i], "early AM"); /* the victim may cut us off: not an error */
        }
        free(reqs);
        printf("sent %ld early control frames\n", n);
        fflush(stdout);
        /* The victim may well have cut this connection: nothing more to check here. */
        return 0;
    }
    memset(&rp, 0, sizeof(rp));
    /* Wired up first (openucx/ucx#6872), so that what follows is what the test is about. */
    rc |= wait_req(ucp_ep_flush_nbx(ep, &rp), "flush");

    if (strcmp(argv[3], "churn") == 0) {
        long n = atol(argv[4]), i;
        for (i = 0; i < n && rc == 0; i++) {
            memset(&rp, 0, sizeof(rp));
            rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            rp.flags        = UCP_EP_CLOSE_FLAG_FORCE;
            (void)wait_req(ucp_ep_close_nbx(ep, &rp), "close");
            if (ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) {
                fprintf(stderr, "hostile_peer: ucp_ep_create failed\n");
                return 1;
            }
            memset(&rp, 0, sizeof(rp));
            rc |= wait_req(ucp_ep_flush_nbx(ep, &rp), "flush");
        }
        printf("connected and disconnected %ld times\n", i);
        argv[3] = "done";
    }

    if (strcmp(argv[3], "flood") == 0 && argc >= 6) {
        long n = atol(argv[4]), i, failed = 0;
        unsigned id = (unsigned)strtoul(argv[5], NULL, 0);
        for (i = 0; i < n; i++) {
            ucs_status_ptr_t r;
            memset(&rp, 0, sizeof(rp));
            rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            rp.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
            r = ucp_am_send_nbx(ep, id, NULL, 0, &payload, sizeof(payload), &rp);
            if (UCS_PTR_IS_ERR(r)) {
                failed++;
                break;
            }
            if (r != NULL) {
                while (ucp_request_check_status(r) == UCS_INPROGRESS) {
                    ucp_worker_progress(worker);
                }
                if (ucp_request_check_status(r) != UCS_OK) {
                    failed++;
                }
                ucp_request_free(r);
                if (failed) {
                    break;
                }
            }
            ucp_worker_progress(worker);
        }
        printf("flooded %ld active messages (%s)\n", i, failed ? "cut off" : "all sent");
        fflush(stdout);
        return leave(ep, ctx, 0);
    }

    if (strcmp(argv[3], "frames") == 0 && argc >= 7) {
        unsigned id = (unsigned)strtoul(argv[4], NULL, 0);
        double until;
        char *tok;
        int sent = 0;
        for (tok = strtok(argv[6], ","); tok != NULL && rc == 0; tok = strtok(NULL, ",")) {
            unsigned char *frame;
            long len = unhex(tok, &frame);
            if (len < 0) {
                fprintf(stderr, "hostile_peer: bad hex frame\n");
                return 2;
            }
            memset(&rp, 0, sizeof(rp));
            rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            rp.flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
            rc |= wait_req(ucp_am_send_nbx(ep, id, NULL, 0, frame, (size_t)len, &rp), "frame");
            free(frame);
            sent++;
        }
        printf("sent %d crafted control frames\n", sent);
        fflush(stdout);
        until = now_ms() + atof(argv[5]);
        while (now_ms() < until) {
            ucp_worker_progress(worker);
        }
        /* The victim may have closed this connection meanwhile (it refused the claim, or its
         * handshake deadline passed): leave without the final flush. */
        return leave(ep, ctx, rc);
    }

    if (strcmp(argv[3], "am") == 0) {
        char *ids = argv[4], *tok;
        int sent = 0;
        for (tok = strtok(ids, ","); tok != NULL && rc == 0; tok = strtok(NULL, ",")) {
            unsigned id = (unsigned)strtoul(tok, NULL, 0);
            int reply;
            for (reply = 0; reply < 2; reply++) {
                memset(&rp, 0, sizeof(rp));
                rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                rp.flags        = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0);
                rc |= wait_req(ucp_am_send_nbx(ep, id, NULL, 0, &payload, sizeof(payload), &rp),
                               "ucp_am_send_nbx");
                sent++;
            }
        }
        printf("sent %d active messages\n", sent);
    } else if (strcmp(argv[3], "tags") == 0 && argc >= 6) {
        long n = atol(argv[4]), i;
        uint64_t seed = strtoull(argv[5], NULL, 0);
        for (i = 0; i < n && rc == 0; i++) {
            memset(&rp, 0, sizeof(rp));
            rc |= wait_req(ucp_tag_send_nbx(ep, &payload, sizeof(payload), splitmix(&seed), &rp),
                           "ucp_tag_send_nbx");
        }
        printf("sent %ld tag messages\n", i);
    } else if (strcmp(argv[3], "mix") == 0 && argc >= 9) {
        double start = now_ms(), until = start + atof(argv[4]), rate = atof(argv[8]);
        uint64_t seed = strtoull(argv[5], NULL, 0), base = strtoull(argv[6], NULL, 0);
        uint64_t pair_mask = strtoull(argv[7], NULL, 0), r, tag;
        long i;
        for (i = 0; rc == 0 && (i % 256 != 0 || now_ms() < until); i++) {
            while (rate > 0 && i % 256 == 0 && i > (now_ms() - start) * rate / 1e3) {
                ucp_worker_progress(worker);
            }
            r   = splitmix(&seed);
            tag = (i % 2 == 0) ? r : (base | (r & pair_mask) | ((r >> 48) % 1000));
            memset(&rp, 0, sizeof(rp));
            rc |= wait_req(ucp_tag_send_nbx(ep, &payload, sizeof(payload), tag, &rp),
                           "ucp_tag_send_nbx");
        }
        printf("sent %ld tag messages\n", i);
    } else if (strcmp(argv[3], "forge") == 0 && argc >= 10) {
        uint64_t base = strtoull(argv[4], NULL, 0), first = strtoull(argv[6], NULL, 0);
        unsigned shift = (unsigned)strtoul(argv[5], NULL, 0);
        long count = atol(argv[7]), copies = atol(argv[8]), sent = 0, c, p;
        static char forged[65536] = {'F', 'O', 'R', 'G', 'E', 'D', '!', '!'};
        size_t size = argc >= 11 ? (size_t)strtoul(argv[10], NULL, 0) : 8;
        uint64_t guesses[64];
        int ng = 0, g;
        char *tok;
        for (tok = strtok(argv[9], ","); tok != NULL && ng < 64; tok = strtok(NULL, ","))
            guesses[ng++] = strtoull(tok, NULL, 0);
        if (size < 8 || size > sizeof(forged)) {
            fprintf(stderr, "hostile_peer: size %zu\n", size);
            return 2;
        }
        memset(forged + 8, 'F', sizeof(forged) - 8);
        if (shift > 63) {
            fprintf(stderr, "hostile_peer: shift %u\n", shift);
            return 2;
        }
        for (g = 0; g < ng && rc == 0; g++)
            for (c = 0; c < copies && rc == 0; c++)
                for (p = 0; p < count && rc == 0; p++) {
                    uint64_t tag = base | (guesses[g] << shift) | (first + (uint64_t)p);
                    memset(&rp, 0, sizeof(rp));
                    rc |= wait_req(ucp_tag_send_nbx(ep, forged, size, tag, &rp),
                                   "ucp_tag_send_nbx");
                    sent++;
                }
        printf("sent %ld forged tag messages\n", sent);
    } else if (strcmp(argv[3], "done") != 0) {
        fprintf(stderr, "hostile_peer: unknown attack %s\n", argv[3]);
        return 2;
    }
    memset(&rp, 0, sizeof(rp));
    rc |= wait_req(ucp_ep_flush_nbx(ep, &rp), "flush");
    fflush(stdout);
    /* Close at once (no goodbye to the victim), then tear down. */
    return leave(ep, ctx, rc);
}
