/* The C ABI from several threads of a UCS_THREAD_MODE_MULTI worker (issue 12), as a C++ engine
 * or ucxx's C++ layer uses it: per rank (2, forked) a host progress thread (the only caller of
 * ucp_worker_progress: UCX's callbacks, tagspace's among them, run there), a tagspace service
 * thread (tagspace_node_progress), and four library threads that register concurrently and
 * each exchange messages with their namesake on the peer through tagspace_node_route /
 * tagspace_node_matcher and the host's own ucp_tag_send_nbx / ucp_tag_recv_nbx. Then, on rank
 * 0, the host's AM handler — inside UCX, on the progress thread, as an endpoint error handler
 * would — calls tagspace_node_peer_failed while the library threads keep routing: each must
 * then see TAGSPACE_ERR_NOT_CONNECTED, and detach follows. Needs a UCX with thread support
 * (says "not run" otherwise). */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>

#define NLIBS 4
#define MSGS 300
#define FAIL_AM 1

static const char *const NAMES[NLIBS] = {"dask", "cuml", "blazingsql", "shuffle-engine"};
static tagspace_node_t *node_;
static ucp_worker_h w_;
static ucp_ep_h eps_[MAX_PROCS];
static uint64_t token_[MAX_PROCS];
static atomic_int stop_, failing_, fail_seen_, traffic_done_;
static atomic_size_t bad_, routes_after_failure_;

/* One request, completed by UCX's callback on the progress thread. */
typedef struct {
    void *req;
    atomic_int done;
    ucs_status_t status;
} op_t;

static void op_send_cb(void *req, ucs_status_t status, void *user)
{
    (void)req;
    op_t *o = user;
    o->status = status;
    atomic_store_explicit(&o->done, 1, memory_order_release);
}

static void op_recv_cb(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info,
                       void *user)
{
    (void)req, (void)info;
    op_t *o = user;
    o->status = status;
    atomic_store_explicit(&o->done, 1, memory_order_release);
}

static void op_start(ucs_status_ptr_t r, op_t *o, const char *what)
{
    if (UCS_PTR_IS_ERR(r)) DIE("%s: %s", what, ucs_status_string(UCS_PTR_STATUS(r)));
    o->req = r;
    if (r == NULL) {
        o->status = UCS_OK;
        atomic_store(&o->done, 1);
    }
}

static void op_wait(op_t *o, size_t n, const char *what)
{
    double deadline = now_s() + DEADLINE_S;
    for (size_t i = 0; i < n; i++) {
        while (!atomic_load_explicit(&o[i].done, memory_order_acquire)) {
            if (now_s() > deadline) DIE("%s: not done after %d s", what, DEADLINE_S);
            sched_yield();
        }
        if (o[i].status != UCS_OK) DIE("%s: %s", what, ucs_status_string(o[i].status));
        if (o[i].req) ucp_request_free(o[i].req);
    }
}

static void *host_progress(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_)) ucp_worker_progress(w_);
    return NULL;
}

static void *service(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_)) {
        int busy = 0;
        ts_check(tagspace_node_progress(node_, &busy), "tagspace_node_progress");
        if (!busy) usleep(50);
    }
    return NULL;
}

/* What the host's endpoint error handler does, here on AM id FAIL_AM: inside UCX. */
static ucs_status_t fail_cb(void *arg, const void *header, size_t header_length, void *data,
                            size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)header_length, (void)data, (void)length, (void)param;
    ts_check(tagspace_node_peer_failed(node_, eps_[1], UCS_ERR_CONNECTION_RESET),
             "tagspace_node_peer_failed");
    atomic_store(&fail_seen_, 1);
    return UCS_OK;
}

static void *library(void *arg)
{
    int l = (int)(intptr_t)arg, peer = 1 - rank_;
    uint32_t lib;
    ts_check(tagspace_node_register(node_, NAMES[l], &lib), "tagspace_node_register");
    void *ep;
    uint64_t tag;
    tagspace_status_t rc;
    double deadline = now_s() + DEADLINE_S;
    while ((rc = tagspace_node_route(node_, lib, token_[peer], 0, &ep, &tag)) != TAGSPACE_OK) {
        if (rc != TAGSPACE_ERR_NOT_CONNECTED && rc != TAGSPACE_ERR_NOT_ANNOUNCED)
            ts_check(rc, "tagspace_node_route");
        if (now_s() > deadline) DIE("%s never routable", NAMES[l]);
        usleep(100);
    }
    static _Thread_local uint64_t rbuf[MSGS][2], tbuf[MSGS][2];
    static _Thread_local op_t rx[MSGS], tx[MSGS];
    for (int k = 0; k < MSGS; k++) {
        tagspace_matcher_t m;
        ts_check(tagspace_node_matcher(node_, lib, token_[peer], (uint64_t)k, &m),
                 "tagspace_node_matcher");
        ucp_request_param_t rq;
        memset(&rq, 0, sizeof rq);
        rq.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        rq.cb.recv = op_recv_cb;
        rq.user_data = &rx[k];
        atomic_init(&rx[k].done, 0);
        op_start(ucp_tag_recv_nbx(w_, rbuf[k], sizeof rbuf[k], m.tag, m.mask, &rq), &rx[k],
                 "ucp_tag_recv_nbx");
    }
    for (int k = 0; k < MSGS; k++) {
        ts_check(tagspace_node_route(node_, lib, token_[peer], (uint64_t)k, &ep, &tag),
                 "tagspace_node_route");
        if (ep != (void *)eps_[peer]) DIE("route is not the host's endpoint");
        tbuf[k][0] = (uint64_t)rank_;
        tbuf[k][1] = (uint64_t)l * 100000 + (uint64_t)k;
        ucp_request_param_t rq;
        memset(&rq, 0, sizeof rq);
        rq.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        rq.cb.send = op_send_cb;
        rq.user_data = &tx[k];
        atomic_init(&tx[k].done, 0);
        op_start(ucp_tag_send_nbx((ucp_ep_h)ep, tbuf[k], sizeof tbuf[k], tag, &rq), &tx[k],
                 "ucp_tag_send_nbx");
    }
    op_wait(tx, MSGS, "sends");
    op_wait(rx, MSGS, "receives");
    for (int k = 0; k < MSGS; k++)
        if (rbuf[k][0] != (uint64_t)peer || rbuf[k][1] != (uint64_t)l * 100000 + (uint64_t)k)
            atomic_fetch_add(&bad_, 1);
    atomic_fetch_add(&traffic_done_, 1);
    if (rank_ != 0) return NULL;
    /* Keep routing while the failure is reported from inside UCX; then it must be refused. */
    while (!atomic_load(&failing_)) usleep(100);
    deadline = now_s() + DEADLINE_S;
    while ((rc = tagspace_node_route(node_, lib, token_[peer], 7, &ep, &tag)) == TAGSPACE_OK) {
        if (atomic_load(&fail_seen_)) atomic_fetch_add(&routes_after_failure_, 1);
        if (now_s() > deadline) DIE("%s still routes to the failed peer", NAMES[l]);
    }
    if (rc != TAGSPACE_ERR_NOT_CONNECTED) ts_check(rc, "route after the failure");
    return NULL;
}

static void nap(void *arg)
{
    (void)arg;
    usleep(1000);
}

static int rank_main(const char *dir)
{
    ucp_context_h ctx;
    ucx_open_mode(UCP_FEATURE_TAG | UCP_FEATURE_AM, UCS_THREAD_MODE_MULTI, &ctx, &w_);
    ucp_am_handler_param_t ap;
    memset(&ap, 0, sizeof ap);
    ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    ap.id = FAIL_AM;
    ap.cb = fail_cb;
    if (rank_ == 0)
        ucs_check(ucp_worker_set_am_recv_handler(w_, &ap), "ucp_worker_set_am_recv_handler");
    connect_all(dir, w_, eps_);
    tagspace_node_options_t o;
    tagspace_node_options_init(&o);
    o.progress = TAGSPACE_PROGRESS_HOST;
    int ucs = 0;
    ts_check(tagspace_node_adopt(w_, NULL, &o, &node_, &ucs), "tagspace_node_adopt");
    tagspace_node_info_t info;
    info.struct_size = sizeof info;
    ts_check(tagspace_node_info(node_, &info), "tagspace_node_info");
    if (info.thread_mode != 2) {
        if (rank_ == 0)
            printf("threads: not run: UCX %u.%u.%u gives no MULTI worker (built without thread "
                   "support)\n", info.ucx_major, info.ucx_minor, info.ucx_release);
        tagspace_node_free(node_);
        close_all(ctx, w_, eps_);
        return 0;
    }
    int peer = 1 - rank_;
    ts_check(tagspace_node_attach(node_, eps_[peer],
                                  rank_ == 0 ? TAGSPACE_SIDE_INITIATOR : TAGSPACE_SIDE_ACCEPTOR),
             "tagspace_node_attach");
    pthread_t prog, serv, libs[NLIBS];
    if (pthread_create(&prog, NULL, host_progress, NULL) ||
        pthread_create(&serv, NULL, service, NULL))
        DIE("pthread_create");
    exchange_u64(dir, "token", info.token, token_, nap, NULL);
    for (int l = 0; l < NLIBS; l++)
        if (pthread_create(&libs[l], NULL, library, (void *)(intptr_t)l)) DIE("pthread_create");
    double deadline = now_s() + DEADLINE_S;
    while (atomic_load(&traffic_done_) < NLIBS) {
        if (now_s() > deadline) DIE("library traffic stuck");
        usleep(1000);
    }
    uint64_t all[MAX_PROCS];
    exchange_u64(dir, "traffic", 1, all, nap, NULL);
    if (rank_ == 0) {
        atomic_store(&failing_, 1);
    } else {
        static const char fail[] = "fail";
        ucp_request_param_t rq;
        memset(&rq, 0, sizeof rq);
        ucs_status_ptr_t r = ucp_am_send_nbx(eps_[0], FAIL_AM, NULL, 0, fail, sizeof fail, &rq);
        if (UCS_PTR_IS_ERR(r)) DIE("ucp_am_send_nbx: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS) usleep(100);
        if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
    }
    for (int l = 0; l < NLIBS; l++) pthread_join(libs[l], NULL);
    int bad = atomic_load(&bad_) != 0;
    if (rank_ == 0) {
        bad |= !atomic_load(&fail_seen_);
        /* Harmless after the failure; required before closing with other threads around. */
        ts_check(tagspace_node_detach(node_, eps_[peer]), "tagspace_node_detach");
        tagspace_node_stats_t st;
        st.struct_size = sizeof st;
        ts_check(tagspace_node_stats(node_, &st), "tagspace_node_stats");
        bad |= st.endpoint_failures != 1 || st.peers != 0;
        printf("threads: rank 0: %d library threads x %d messages each way, misdelivered %zu; "
               "peer_failed from inside UCX while routing (%zu routes answered in the window), "
               "then NOT_CONNECTED; endpoint failures %" PRIu64 ", peers %" PRIu64 "\n",
               NLIBS, MSGS, atomic_load(&bad_), atomic_load(&routes_after_failure_),
               st.endpoint_failures, st.peers);
    }
    exchange_u64(dir, "done", 1, all, nap, NULL);
    atomic_store(&stop_, 1);
    pthread_join(serv, NULL);
    pthread_join(prog, NULL);
    tagspace_node_free(node_);
    close_all(ctx, w_, eps_);
    return bad;
}

int main(void)
{
    nprocs_ = 2;
    int rc = run_ranks("threads", rank_main);
    if (rc == 0) printf("threads: OK\n");
    return rc;
}
