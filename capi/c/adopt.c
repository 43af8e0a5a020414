/* A host that owns its UCX worker and endpoints (plain libucp, as ucxx or a C++ engine does)
 * hands them to tagspace through the C ABI's host mode, and keeps its own data path:
 *   tagspace_node_adopt      tagspace on the host's worker (the host keeps progressing it)
 *   tagspace_node_attach     each endpoint, the lower rank as initiator
 *   tagspace_node_route      the endpoint and tag for (library, peer, payload): passed to the
 *                            host's own ucp_tag_send_nbx
 *   tagspace_node_matcher    the exact tag/mask for the host's own ucp_tag_recv_nbx (from
 *                            one peer: only its messages match)
 *   tagspace_node_detach / _free, then the host closes its endpoints and worker.
 * 2-4 processes; three libraries with *dynamic* names registered in a different order in each
 * process (so the same name has different ids in different processes: only the handshake makes
 * routing right), beside the host's own traffic: random 64-bit tags (as ucxx hashes them), a
 * third forced into the receiver's tagspace ids and a third into the control id, half received
 * by receives posted early and half left unexpected until the end, and Active Messages on id 0.
 * Each rank checks every message arrived once, at the receive built for it (0 misdelivered),
 * every host message is still there for the host (0 stolen), and every peer came up.
 *   adopt [--procs N] [--rounds R]      (UCX_TLS chooses the transport) */
#include "common.h"

static const char *const LIBS[3] = {"shuffle-engine", "collectives", "blazing-exchange"};
static int rounds_ = 200;
static uint64_t ns_mask_;
static unsigned ns_shift_;
static uint64_t am0_count_;
static uint64_t host_body_[MAX_PROCS][3 * 2048]; /* the host's message bodies: their tags */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The host's k-th tag from `from` to `to`; `ids` are the receiver's three tagspace ids. */
static uint64_t host_tag(int from, int to, int k, const uint64_t ids[3])
{
    uint64_t t = mix(((uint64_t)from << 48) ^ ((uint64_t)to << 32) ^ (uint64_t)k);
    switch (k % 3) {
    case 1: return (t & ~ns_mask_) | (ids[(k / 3) % 3] << ns_shift_);
    case 2: return (t & ~ns_mask_) | ((uint64_t)TAGSPACE_NS_CONTROL << ns_shift_);
    default: return t;
    }
}

static ucs_status_t am0_cb(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)header_length, (void)data, (void)length, (void)param;
    am0_count_++;
    return UCS_OK;
}

static void pump(ucp_worker_h w, tagspace_node_t *node)
{
    ucp_worker_progress(w);
    ts_check(tagspace_node_progress(node, NULL), "tagspace_node_progress");
}

struct pump_arg {
    ucp_worker_h w;
    tagspace_node_t *node;
};

static void pump_cb(void *arg)
{
    struct pump_arg *a = arg;
    pump(a->w, a->node);
}

static void wait_files(const char *dir, const char *what, ucp_worker_h w, tagspace_node_t *node)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%d", dir, what, rank_);
    FILE *f = fopen(path, "w");
    if (!f || fclose(f) != 0) DIE("write %s", path);
    double deadline = now_s() + DEADLINE_S;
    for (int r = 0; r < nprocs_; r++) {
        snprintf(path, sizeof path, "%s/%s.%d", dir, what, r);
        while (access(path, F_OK) != 0) {
            pump(w, node);
            if (now_s() > deadline) DIE("rank %d never reached '%s'", r, what);
        }
    }
}

static int rank_main(const char *dir)
{
    ucp_context_h ctx;
    ucp_worker_h w;
    ucx_open(UCP_FEATURE_TAG | UCP_FEATURE_AM, &ctx, &w);
    ucp_am_handler_param_t ap;
    memset(&ap, 0, sizeof ap);
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    ap.id = 0; /* the host's own AM id, as ucxx's */
    ap.cb = am0_cb;
    ucs_check(ucp_worker_set_am_recv_handler(w, &ap), "ucp_worker_set_am_recv_handler");
    ucp_ep_h eps[MAX_PROCS];
    connect_all(dir, w, eps);

    tagspace_node_options_t o;
    tagspace_node_options_init(&o);
    o.progress = TAGSPACE_PROGRESS_HOST;
    tagspace_node_t *node;
    int ucs = 0;
    ts_check(tagspace_node_adopt(w, NULL, &o, &node, &ucs), "tagspace_node_adopt");
    tagspace_node_info_t info;
    info.struct_size = sizeof info;
    ts_check(tagspace_node_info(node, &info), "tagspace_node_info");
    tagspace_registry_t *global;
    ts_check(tagspace_registry_global(&global), "tagspace_registry_global");
    tagspace_registry_info_t ri;
    ri.struct_size = sizeof ri;
    ts_check(tagspace_registry_info(global, &ri), "tagspace_registry_info");
    tagspace_registry_free(global);
    ns_shift_ = ri.namespace_shift;
    ns_mask_ = ((1ull << ri.namespace_width) - 1) << ri.namespace_shift;
    if (rank_ == 0)
        printf("adopt: %d processes, UCX %u.%u.%u loaded, worker thread mode %u, host progress\n",
               nprocs_, info.ucx_major, info.ucx_minor, info.ucx_release, info.thread_mode);

    uint32_t lib[3];
    uint64_t my_ids[3];
    for (int i = 0; i < 3; i++) {
        int l = (i + rank_) % 3; /* a different order in each process */
        ts_check(tagspace_node_register(node, LIBS[l], &lib[l]), "tagspace_node_register");
        ts_check(tagspace_node_listen(node, lib[l]), "tagspace_node_listen");
    }
    for (int l = 0; l < 3; l++) {
        tagspace_matcher_t m;
        ts_check(tagspace_node_matcher_any_peer(node, lib[l], 0, &m),
                 "tagspace_node_matcher_any_peer");
        my_ids[l] = (m.tag & ns_mask_) >> ns_shift_;
    }
    for (int r = 0; r < nprocs_; r++)
        if (r != rank_)
            ts_check(tagspace_node_attach(node, eps[r],
                                          rank_ < r ? TAGSPACE_SIDE_INITIATOR
                                                    : TAGSPACE_SIDE_ACCEPTOR),
                     "tagspace_node_attach");

    /* Who is who: tokens through files (a runtime has its own rank exchange). */
    uint64_t token[MAX_PROCS];
    struct pump_arg pa = {w, node};
    exchange_u64(dir, "token", info.token, token, pump_cb, &pa);
    double deadline = now_s() + DEADLINE_S;
    /* Every peer's three libraries routable (handshake done, names announced). */
    for (int r = 0; r < nprocs_; r++) {
        for (int l = 0; r != rank_ && l < 3; l++) {
            void *ep;
            uint64_t tag;
            tagspace_status_t rc;
            while ((rc = tagspace_node_route(node, lib[l], token[r], 0, &ep, &tag)) !=
                   TAGSPACE_OK) {
                if (rc != TAGSPACE_ERR_NOT_CONNECTED && rc != TAGSPACE_ERR_NOT_ANNOUNCED)
                    ts_check(rc, "tagspace_node_route");
                pump(w, node);
                if (now_s() > deadline) DIE("no route to rank %d's %s", r, LIBS[l]);
            }
            if (ep != (void *)eps[r]) DIE("route to rank %d is not the host's endpoint", r);
        }
    }

    /* Receives: tagspace's (exact matchers) for every peer/library/round, the host's own for
     * the even rounds (the odd ones stay unexpected until the end). */
    size_t per = (size_t)(nprocs_ - 1) * 3 * rounds_;
    pending_t *rx = calloc(per, sizeof *rx), *hrx = calloc(per, sizeof *hrx);
    pending_t *tx = calloc(2 * per + nprocs_ * rounds_, sizeof *tx);
    uint64_t *htag = calloc(per, sizeof *htag);
    char(*rbuf)[32] = calloc(per, 32), (*hbuf)[32] = calloc(per, 32),
        (*tbuf)[32] = calloc(per, 32);
    if (!rx || !hrx || !tx || !htag || !rbuf || !hbuf || !tbuf) DIE("out of memory");
    size_t n = 0, nh = 0;
    for (int r = 0; r < nprocs_; r++) {
        if (r == rank_) continue;
        for (int l = 0; l < 3; l++)
            for (int k = 0; k < rounds_; k++, n++) {
                tagspace_matcher_t m;
                ts_check(tagspace_node_matcher(node, lib[l], token[r],
                                               (uint64_t)r * rounds_ + k, &m),
                         "tagspace_node_matcher");
                ucp_request_param_t rq = recv_param(&rx[n]);
                start(ucp_tag_recv_nbx(w, rbuf[n], 32, m.tag, m.mask, &rq), &rx[n], "recv");
            }
        for (int k = 0; k < 3 * rounds_; k += 2, nh++) {
            ucp_request_param_t rq = recv_param(&hrx[nh]);
            htag[nh] = host_tag(r, rank_, k, my_ids);
            start(ucp_tag_recv_nbx(w, hbuf[nh], 32, htag[nh], ~0ull, &rq), &hrx[nh],
                  "host recv");
        }
    }
    wait_files(dir, "posted", w, node);

    /* Sends: tagspace's through route + the host's own ucp_tag_send_nbx, interleaved with the
     * host's random tags and AMs on id 0 on the same endpoints. */
    size_t nt = 0, nb = 0;
    for (int r = 0; r < nprocs_; r++) {
        if (r == rank_) continue;
        uint64_t peer_ids[3];
        for (int l = 0; l < 3; l++) {
            void *ep;
            uint64_t tag;
            ts_check(tagspace_node_route(node, lib[l], token[r], 0, &ep, &tag), "route");
            peer_ids[l] = (tag & ns_mask_) >> ns_shift_;
        }
        for (int k = 0; k < 3 * rounds_; k++) {
            int l = k % 3, round = k / 3;
            void *ep;
            uint64_t tag;
            ts_check(tagspace_node_route(node, lib[l], token[r],
                                         (uint64_t)rank_ * rounds_ + round, &ep, &tag),
                     "tagspace_node_route");
            snprintf(tbuf[nb], 32, "%d:%s:%d", rank_, LIBS[l], round);
            ucp_request_param_t rq = send_param(&tx[nt]);
            start(ucp_tag_send_nbx(ep, tbuf[nb], 32, tag, &rq), &tx[nt], "send");
            nt++, nb++;
            uint64_t *hb = &host_body_[r][k];
            *hb = host_tag(rank_, r, k, peer_ids);
            rq = send_param(&tx[nt]);
            start(ucp_tag_send_nbx(eps[r], hb, 8, *hb, &rq), &tx[nt], "host send");
            nt++;
            if (k % 30 == 0) {
                ucp_request_param_t aq = send_param(&tx[nt]);
                aq.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
                aq.flags = UCP_AM_SEND_FLAG_EAGER;
                start(ucp_am_send_nbx(eps[r], 0, NULL, 0, hb, 8, &aq), &tx[nt], "am0");
                nt++;
            }
        }
    }
    /* The host progresses; tagspace handles what arrives. */
    deadline = now_s() + DEADLINE_S;
    for (size_t i = 0; i < n; i++)
        while (!rx[i].done) {
            pump(w, node);
            if (now_s() > deadline) DIE("tagspace receives: %zu of %zu not done", n - i, n);
        }
    for (size_t i = 0; i < nt; i++)
        while (!tx[i].done) {
            pump(w, node);
            if (now_s() > deadline) DIE("sends: %zu of %zu not done", nt - i, nt);
        }
    for (size_t i = 0; i < nh; i++)
        while (!hrx[i].done) {
            pump(w, node);
            if (now_s() > deadline) DIE("host receives: %zu of %zu not done", nh - i, nh);
        }
    size_t misdelivered = 0;
    n = 0;
    for (int r = 0; r < nprocs_; r++) {
        if (r == rank_) continue;
        for (int l = 0; l < 3; l++)
            for (int k = 0; k < rounds_; k++, n++) {
                char want[32];
                snprintf(want, sizeof want, "%d:%s:%d", r, LIBS[l], k);
                if (rx[n].status != UCS_OK || strcmp(rbuf[n], want) != 0) misdelivered++;
                if (rx[n].req) ucp_request_free(rx[n].req);
            }
    }
    for (size_t i = 0; i < nt; i++) {
        if (tx[i].status != UCS_OK) DIE("a send failed: %s", ucs_status_string(tx[i].status));
        if (tx[i].req) ucp_request_free(tx[i].req);
    }
    size_t host_early_ok = 0;
    for (size_t i = 0; i < nh; i++) {
        uint64_t body;
        memcpy(&body, hbuf[i], sizeof body);
        host_early_ok += hrx[i].status == UCS_OK && body == htag[i];
        if (hrx[i].req) ucp_request_free(hrx[i].req);
    }
    wait_files(dir, "sent", w, node);

    /* 0 stolen: every odd-round host message waits for the host, exactly once. */
    size_t stolen = 0, host_ok = 0;
    for (int r = 0; r < nprocs_; r++) {
        if (r == rank_) continue;
        for (int k = 1; k < 3 * rounds_; k += 2) {
            uint64_t t = host_tag(r, rank_, k, my_ids);
            ucp_tag_recv_info_t ti;
            ucp_tag_message_h msg = NULL;
            double until = now_s() + 5;
            while (!(msg = ucp_tag_probe_nb(w, t, ~0ull, 1, &ti)) && now_s() < until)
                pump(w, node);
            if (!msg) {
                stolen++;
                continue;
            }
            uint64_t body = 0;
            pending_t p;
            ucp_request_param_t rq = recv_param(&p);
            start(ucp_tag_msg_recv_nbx(w, &body, sizeof body, msg, &rq), &p, "host late recv");
            wait_all(w, &p, 1, "host late recv");
            if (body == t) host_ok++;
        }
    }
    wait_files(dir, "checked", w, node);
    uint64_t am_want = (uint64_t)(nprocs_ - 1) * ((3 * rounds_ + 29) / 30);
    deadline = now_s() + DEADLINE_S;
    while (am0_count_ < am_want && now_s() < deadline) pump(w, node);

    tagspace_node_stats_t st;
    st.struct_size = sizeof st;
    ts_check(tagspace_node_stats(node, &st), "tagspace_node_stats");
    int ups = 0;
    tagspace_peer_event_t ev;
    do {
        ts_check(tagspace_node_poll_event(node, lib[0], &ev), "tagspace_node_poll_event");
        ups += ev.kind == TAGSPACE_EVENT_UP;
    } while (ev.kind != TAGSPACE_EVENT_NONE);
    printf("rank %d: tagspace %zu received, misdelivered %zu; host %zu+%zu received, stolen %zu; "
           "AM id 0 %" PRIu64 "/%" PRIu64 "; peers up %d/%d; %" PRIu64 " connections\n",
           rank_, n, misdelivered, nh, host_ok, stolen, am0_count_, am_want, ups, nprocs_ - 1,
           st.connections);
    int bad = misdelivered || stolen || host_early_ok != nh || host_ok != (size_t)(nprocs_ - 1) * (3 * rounds_ / 2) ||
              am0_count_ != am_want || ups != nprocs_ - 1 || st.protocol_errors != 0;

    for (int r = 0; r < nprocs_; r++)
        if (r != rank_) ts_check(tagspace_node_detach(node, eps[r]), "tagspace_node_detach");
    wait_files(dir, "detached", w, node);
    tagspace_node_free(node);
    close_all(ctx, w, eps);
    free(rx), free(hrx), free(tx), free(htag), free(rbuf), free(hbuf), free(tbuf);
    return bad;
}

int main(int argc, char **argv)
{
    nprocs_ = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--procs") && i + 1 < argc)
            nprocs_ = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds_ = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--procs 2..%d] [--rounds 1..2048]\n", argv[0], MAX_PROCS);
            return 2;
        }
    }
    if (nprocs_ < 2 || nprocs_ > MAX_PROCS || rounds_ < 1 || rounds_ > 2048) {
        fprintf(stderr, "%s: --procs 2..%d, --rounds 1..2048\n", argv[0], MAX_PROCS);
        return 2;
    }
    if (tagspace_abi_version() != TAGSPACE_ABI_VERSION) {
        fprintf(stderr, "%s: libtagspace ABI %u, header %u\n", argv[0], tagspace_abi_version(),
                TAGSPACE_ABI_VERSION);
        return 1;
    }
    int rc = run_ranks("adopt", rank_main);
    if (rc == 0) printf("adopt: OK: every message arrived once at its receive; nothing stolen\n");
    return rc;
}
