/* What a host pays for tagspace on its own data path: its ucp_tag_send_nbx / ucp_tag_recv_nbx
 * routed through the C ABI's host mode (tagspace adopted the host's worker and endpoint; one
 * tagspace_node_route call per send — the endpoint and the peer's tag for a dynamic name — and
 * one tagspace_node_matcher call per receive) against the same calls with a fixed tag. Two
 * processes on the host's own worker.
 * Blocks of the two variants alternate, so the machine's noise falls on both; the report is the
 * median block of each and their ratio (tagspace / raw: latency wants <= 1.03, bandwidth
 * >= 0.98). Transport: whatever UCX_TLS selects.
 *
 *   tagspace-c-bench [--quick]        (--quick: a smoke run, the numbers mean little) */
#include "common.h"

#define RAW_TAG 0x1234ull
#define ACK_TAG 0xacull
#define MAX_WINDOW 64

static tagspace_node_t *node_;
static uint32_t lib_;
static uint64_t peer_;
static ucp_worker_h w_;
static ucp_ep_h ep_;
static char *buf_;
static int quick_;

/* The endpoint and tag to send with: the fixed ones, or routed through the C ABI each time. */
static uint64_t send_tag(int ts, ucp_ep_h *ep)
{
    uint64_t t = RAW_TAG;
    *ep = ep_;
    if (ts) {
        void *e;
        ts_check(tagspace_node_route(node_, lib_, peer_, RAW_TAG, &e, &t), "tagspace_node_route");
        *ep = e;
    }
    return t;
}

/* The tag to receive (full mask): fixed, or the exact matcher built through the C ABI. */
static uint64_t recv_tag(int ts)
{
    if (!ts) return RAW_TAG;
    tagspace_matcher_t m;
    ts_check(tagspace_node_matcher(node_, lib_, peer_, RAW_TAG, &m), "tagspace_node_matcher");
    return m.tag;
}

static void post_send(pending_t *p, int ts, size_t len)
{
    ucp_ep_h ep;
    uint64_t tag = send_tag(ts, &ep);
    ucp_request_param_t rq = send_param(p);
    start(ucp_tag_send_nbx(ep, buf_, len, tag, &rq), p, "ucp_tag_send_nbx");
}

static void post_send_fixed(pending_t *p, uint64_t tag, size_t len)
{
    ucp_request_param_t rq = send_param(p);
    start(ucp_tag_send_nbx(ep_, buf_, len, tag, &rq), p, "ucp_tag_send_nbx");
}

static void post_recv(pending_t *p, uint64_t tag, size_t len)
{
    ucp_request_param_t rq = recv_param(p);
    start(ucp_tag_recv_nbx(w_, buf_, len, tag, ~0ull, &rq), p, "ucp_tag_recv_nbx");
}

/* One block of ping-pongs; rank 0 returns the mean one-way latency in microseconds. */
static double latency_block(int ts, size_t len, int iters)
{
    pending_t p;
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
        if (rank_ == 0) {
            post_send(&p, ts, len);
            wait_all(w_, &p, 1, "ping");
            post_recv(&p, recv_tag(ts), len);
            wait_all(w_, &p, 1, "pong");
        } else {
            post_recv(&p, recv_tag(ts), len);
            wait_all(w_, &p, 1, "ping");
            post_send(&p, ts, len);
            wait_all(w_, &p, 1, "pong");
        }
    }
    return (now_s() - t0) * 1e6 / (2.0 * iters);
}

/* One block of `n` messages streamed from rank 0 to rank 1, `window` in flight, closed by an
 * acknowledgement; rank 0 returns MB/s. */
static double bandwidth_block(int ts, size_t len, int n, int window)
{
    pending_t p[MAX_WINDOW], ack;
    double t0 = now_s();
    for (int done = 0; done < n; done += window) {
        int k = n - done < window ? n - done : window;
        for (int j = 0; j < k; j++) {
            if (rank_ == 0) post_send(&p[j], ts, len);
            else post_recv(&p[j], recv_tag(ts), len);
        }
        wait_all(w_, p, k, "stream");
    }
    if (rank_ == 0) post_recv(&ack, ACK_TAG, 1);
    else post_send_fixed(&ack, ACK_TAG, 1);
    wait_all(w_, &ack, 1, "ack");
    return (double)len * n / (now_s() - t0) / 1e6;
}

static int cmp_double(const void *a, const void *b);
static double median(double *v, int n);

/* The routing call alone (ns per call, median of blocks). */
static void route_cost(void)
{
    const int blocks = quick_ ? 2 : 15, n = quick_ ? 100000 : 2000000;
    double v[16];
    volatile uint64_t sink = 0;
    for (int b = 0; b < blocks; b++) {
        double t0 = now_s();
        for (int i = 0; i < n; i++) {
            void *e;
            uint64_t t;
            ts_check(tagspace_node_route(node_, lib_, peer_, (uint64_t)i, &e, &t), "route");
            sink += t;
        }
        v[b] = (now_s() - t0) * 1e9 / n;
    }
    (void)sink;
    printf("%-22s tagspace_node_route %6.2f ns (endpoint and peer's tag for a dynamic name)\n",
           "routing one message", median(v, blocks));
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void report(const char *what, double *raw, double *ts, int blocks, const char *unit, const char *want)
{
    if (rank_ != 0) return;
    double r = median(raw, blocks), t = median(ts, blocks);
    printf("%-22s raw %10.2f %s   tagspace %10.2f %s   ratio %.3f (%s)\n", what, r, unit, t, unit, t / r, want);
}

static void pump_cb(void *arg)
{
    (void)arg;
    ucp_worker_progress(w_);
    ts_check(tagspace_node_progress(node_, NULL), "tagspace_node_progress");
}

static int rank_main(const char *dir)
{
    ucp_context_h ctx;
    ucx_open(UCP_FEATURE_TAG | UCP_FEATURE_AM, &ctx, &w_);
    ucp_ep_h eps[MAX_PROCS];
    connect_all(dir, w_, eps);
    ep_ = eps[1 - rank_];
    /* tagspace on the host's worker and endpoint; no heartbeat during the measurement (the
     * node is not progressed there: the host's data path is all that runs). */
    tagspace_node_options_t o;
    tagspace_node_options_init(&o);
    o.heartbeat_interval_ms = 0;
    ts_check(tagspace_node_adopt(w_, NULL, &o, &node_, NULL), "tagspace_node_adopt");
    /* In a different order on each side, so "bench.lib" has a different id on each. */
    uint32_t other;
    if (rank_) ts_check(tagspace_node_register(node_, "bench.other", &other), "register");
    ts_check(tagspace_node_register(node_, "bench.lib", &lib_), "tagspace_node_register");
    if (!rank_) ts_check(tagspace_node_register(node_, "bench.other", &other), "register");
    ts_check(tagspace_node_attach(node_, ep_,
                                  rank_ == 0 ? TAGSPACE_SIDE_INITIATOR : TAGSPACE_SIDE_ACCEPTOR),
             "tagspace_node_attach");
    tagspace_node_info_t info;
    info.struct_size = sizeof info;
    ts_check(tagspace_node_info(node_, &info), "tagspace_node_info");
    uint64_t tokens[2];
    exchange_u64(dir, "token", info.token, tokens, pump_cb, NULL);
    peer_ = tokens[1 - rank_];
    double deadline = now_s() + DEADLINE_S;
    for (;;) {
        void *e;
        uint64_t t;
        tagspace_status_t rc = tagspace_node_route(node_, lib_, peer_, RAW_TAG, &e, &t);
        if (rc == TAGSPACE_OK) break;
        if (rc != TAGSPACE_ERR_NOT_CONNECTED && rc != TAGSPACE_ERR_NOT_ANNOUNCED)
            ts_check(rc, "tagspace_node_route");
        pump_cb(NULL);
        if (now_s() > deadline) DIE("no route to the peer's bench.lib");
    }
    uint64_t done[2];
    exchange_u64(dir, "routed", 1, done, pump_cb, NULL); /* both sides can route */
    if (rank_ == 0) route_cost();
    buf_ = calloc(1, 1 << 20);
    if (!buf_) DIE("out of memory");

    const int blocks = quick_ ? 2 : 15, scale = quick_ ? 100 : 1;
    double raw[16], ts[16]; /* blocks <= 16 */
    char what[64];
    /* Warm-up: wire-up, rendezvous lanes, caches. */
    latency_block(0, 8, 10000 / scale);
    bandwidth_block(1, 1 << 20, 100 / scale + 1, 4);

    static const size_t lat_sizes[] = {8};
    for (size_t s = 0; s < sizeof lat_sizes / sizeof *lat_sizes; s++) {
        for (int b = 0; b < 2 * blocks; b++) {
            double v = latency_block(b % 2, lat_sizes[s], 50000 / scale);
            if (b % 2) ts[b / 2] = v;
            else raw[b / 2] = v;
        }
        snprintf(what, sizeof what, "latency %zu B", lat_sizes[s]);
        report(what, raw, ts, blocks, "us  ", "want <= 1.03");
    }
    static const struct { size_t len; int n, window; } bw[] = {
        {8, 500000, 64}, {64 << 10, 10000, 16}, {1 << 20, 1000, 4}};
    for (size_t s = 0; s < sizeof bw / sizeof *bw; s++) {
        for (int b = 0; b < 2 * blocks; b++) {
            double v = bandwidth_block(b % 2, bw[s].len, bw[s].n / scale, bw[s].window);
            if (b % 2) ts[b / 2] = v;
            else raw[b / 2] = v;
        }
        snprintf(what, sizeof what, "bandwidth %zu B", bw[s].len);
        report(what, raw, ts, blocks, "MB/s", "want >= 0.98");
    }

    /* Barrier, so neither side closes while the other still needs it. */
    pending_t p[2];
    uint64_t token = 0;
    ucp_request_param_t rq = recv_param(&p[0]);
    start(ucp_tag_recv_nbx(w_, &token, sizeof token, ACK_TAG + 1, ~0ull, &rq), &p[0], "barrier");
    rq = send_param(&p[1]);
    start(ucp_tag_send_nbx(ep_, &token, sizeof token, ACK_TAG + 1, &rq), &p[1], "barrier");
    wait_all(w_, p, 2, "barrier");
    ts_check(tagspace_node_detach(node_, ep_), "tagspace_node_detach");
    tagspace_node_free(node_);
    close_all(ctx, w_, eps);
    free(buf_);
    return 0;
}

/* The ABI call alone, against the hand-written shift/or it replaces (ns per tag, median of
 * blocks), so the data-path ratios above can be read against what the call itself costs. */
static void tag_cost(void)
{
    tagspace_registry_t *reg;
    tagspace_namespace_t *ns;
    uint16_t id;
    ts_check(tagspace_registry_global(&reg), "tagspace_registry_global");
    ts_check(tagspace_register(reg, "bench.tags", &ns), "tagspace_register");
    ts_check(tagspace_namespace_id(ns, &id), "tagspace_namespace_id");
    const int blocks = quick_ ? 2 : 15, n = quick_ ? 100000 : 2000000;
    double abi[16], hand[16];
    volatile uint64_t sink = 0;
    for (int b = 0; b < blocks; b++) {
        double t0 = now_s();
        for (int i = 0; i < n; i++) {
            uint64_t t;
            ts_check(tagspace_tag(ns, (uint64_t)i, &t), "tagspace_tag");
            sink += t;
        }
        abi[b] = (now_s() - t0) * 1e9 / n;
        t0 = now_s();
        for (int i = 0; i < n; i++) {
            volatile uint64_t payload = (uint64_t)i; /* keep the compiler from folding the loop */
            sink += ((uint64_t)id << 56) | payload;
        }
        hand[b] = (now_s() - t0) * 1e9 / n;
    }
    (void)sink;
    printf("%-22s hand-written shift/or %6.2f ns   tagspace_tag %6.2f ns\n", "building one tag",
           median(hand, blocks), median(abi, blocks));
    tagspace_release(ns);
    tagspace_registry_free(reg);
}

int main(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--quick")) quick_ = 1;
        else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    nprocs_ = 2;
    const char *tls = getenv("UCX_TLS");
    printf("tagspace C ABI on the host's data path vs raw libucp (UCX %s, UCX_TLS=%s)%s\n",
           ucp_get_version_string(), tls ? tls : "(default)", quick_ ? ", quick: smoke run only" : "");
    tag_cost();
    fflush(stdout);
    return run_ranks(argv[0], rank_main);
}
