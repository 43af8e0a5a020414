/* What the C programs here share: a host's plumbing on plain libucp (context, worker, endpoints
 * by worker address through files in a private directory, requests, forked ranks). Nothing
 * tagspace-specific except the status check. */
#ifndef TAGSPACE_C_COMMON_H
#define TAGSPACE_C_COMMON_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tagspace.h>
#include <ucp/api/ucp.h>

#define MAX_PROCS 16
#define DEADLINE_S 90

static int rank_, nprocs_;

#define DIE(...)                                                                               \
    do {                                                                                       \
        fprintf(stderr, "rank %d: ", rank_);                                                   \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, "\n");                                                                 \
        exit(1);                                                                               \
    } while (0)

static inline void ts_check(tagspace_status_t rc, const char *what)
{
    if (rc != TAGSPACE_OK) {
        char msg[256];
        tagspace_last_error(msg, sizeof msg);
        DIE("%s: %s (%s)", what, tagspace_strerror(rc), msg);
    }
}

static inline void ucs_check(ucs_status_t st, const char *what)
{
    if (st != UCS_OK) DIE("%s: %s", what, ucs_status_string(st));
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One send or receive: its request (NULL once freed or if it completed at once) and outcome. */
typedef struct {
    void *req;
    int done;
    ucs_status_t status;
    ucp_tag_recv_info_t info;
} pending_t;

static inline void send_cb(void *req, ucs_status_t status, void *user)
{
    (void)req;
    pending_t *p = user;
    p->status = status;
    p->done = 1;
}

static inline void recv_cb(void *req, ucs_status_t status, const ucp_tag_recv_info_t *info,
                           void *user)
{
    (void)req;
    pending_t *p = user;
    p->status = status;
    p->info = *info;
    p->done = 1;
}

static inline ucp_request_param_t send_param(pending_t *p)
{
    ucp_request_param_t rq;
    memset(&rq, 0, sizeof rq);
    memset(p, 0, sizeof *p);
    rq.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rq.cb.send = send_cb;
    rq.user_data = p;
    return rq;
}

static inline ucp_request_param_t recv_param(pending_t *p)
{
    ucp_request_param_t rq;
    memset(&rq, 0, sizeof rq);
    memset(p, 0, sizeof *p);
    rq.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_RECV_INFO;
    rq.cb.recv = recv_cb;
    rq.user_data = p;
    rq.recv_info.tag_info = &p->info;
    return rq;
}

/* Records what a `*_nbx` call returned: NULL means it completed at once. */
static inline void start(ucs_status_ptr_t r, pending_t *p, const char *what)
{
    if (r == NULL) {
        p->done = 1;
        p->status = UCS_OK;
        p->req = NULL;
    } else if (UCS_PTR_IS_ERR(r)) {
        DIE("%s: %s", what, ucs_status_string(UCS_PTR_STATUS(r)));
    } else {
        p->req = r;
    }
}

static inline void wait_all(ucp_worker_h w, pending_t *p, size_t n, const char *what)
{
    double deadline = now_s() + DEADLINE_S;
    for (size_t i = 0; i < n; i++) {
        while (!p[i].done) {
            ucp_worker_progress(w);
            if (now_s() > deadline)
                DIE("%s: %zu of %zu not done after %d s", what, n - i, n, DEADLINE_S);
        }
        if (p[i].req) ucp_request_free(p[i].req);
        p[i].req = NULL;
        if (p[i].status != UCS_OK) DIE("%s: %s", what, ucs_status_string(p[i].status));
    }
}

/* The host's own UCX: a context with `features` and a worker in thread mode `mode`. */
static inline void ucx_open_mode(uint64_t features, ucs_thread_mode_t mode, ucp_context_h *ctx,
                                 ucp_worker_h *w)
{
    ucp_config_t *cfg;
    ucs_check(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    ucp_params_t pp;
    memset(&pp, 0, sizeof pp);
    pp.field_mask = UCP_PARAM_FIELD_FEATURES;
    pp.features = features;
    ucs_check(ucp_init(&pp, cfg, ctx), "ucp_init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = mode;
    ucs_check(ucp_worker_create(*ctx, &wp, w), "ucp_worker_create");
}

/* The host's own UCX: a context with `features` and a single-threaded worker. */
static inline void ucx_open(uint64_t features, ucp_context_h *ctx, ucp_worker_h *w)
{
    ucx_open_mode(features, UCS_THREAD_MODE_SINGLE, ctx, w);
}

static inline void publish_address(const char *dir, ucp_worker_h w)
{
    ucp_address_t *addr;
    size_t len;
    ucs_check(ucp_worker_get_address(w, &addr, &len), "ucp_worker_get_address");
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/addr.%d.tmp", dir, rank_);
    snprintf(path, sizeof path, "%s/addr.%d", dir, rank_);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(addr, 1, len, f) != len || fclose(f) != 0)
        DIE("write %s: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) DIE("rename %s: %s", tmp, strerror(errno));
    ucp_worker_release_address(w, addr);
}

/* Publishes this rank's address and connects to every other rank (eps[rank_] stays NULL). */
static inline void connect_all(const char *dir, ucp_worker_h w, ucp_ep_h *eps)
{
    publish_address(dir, w);
    for (int r = 0; r < nprocs_; r++) {
        eps[r] = NULL;
        if (r == rank_) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/addr.%d", dir, r);
        double deadline = now_s() + DEADLINE_S;
        FILE *f;
        while (!(f = fopen(path, "rb"))) {
            if (now_s() > deadline) DIE("rank %d never published its address", r);
            usleep(10000);
        }
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (n == 0 || n == sizeof buf) DIE("%s: bad address file (%zu bytes)", path, n);
        ucp_ep_params_t ep;
        memset(&ep, 0, sizeof ep);
        ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        ep.address = (const ucp_address_t *)buf;
        ucs_check(ucp_ep_create(w, &ep, &eps[r]), "ucp_ep_create");
    }
}

/* Publishes `mine` as `dir/what.<rank>` and reads every other rank's into `all` (a runtime has
 * its own rank exchange), calling `pump(arg)` while it waits. */
static inline void exchange_u64(const char *dir, const char *what, uint64_t mine, uint64_t *all,
                                void (*pump)(void *), void *arg)
{
    char path[4096], tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/%s.%d.tmp", dir, what, rank_);
    snprintf(path, sizeof path, "%s/%s.%d", dir, what, rank_);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%" PRIx64, mine) < 0 || fclose(f) != 0) DIE("write %s", tmp);
    if (rename(tmp, path) != 0) DIE("rename %s: %s", tmp, strerror(errno));
    double deadline = now_s() + DEADLINE_S;
    for (int r = 0; r < nprocs_; r++) {
        all[r] = mine;
        if (r == rank_) continue;
        snprintf(path, sizeof path, "%s/%s.%d", dir, what, r);
        while (!(f = fopen(path, "r")) || fscanf(f, "%" SCNx64, &all[r]) != 1) {
            if (f) fclose(f);
            pump(arg);
            if (now_s() > deadline) DIE("rank %d never published its %s", r, what);
        }
        fclose(f);
    }
}

/* Closes every endpoint without waiting on peers (call it after a barrier), then the worker. */
static inline void close_all(ucp_context_h ctx, ucp_worker_h w, ucp_ep_h *eps)
{
    for (int r = 0; r < nprocs_; r++) {
        if (!eps[r]) continue;
        ucp_request_param_t rq;
        memset(&rq, 0, sizeof rq);
        rq.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        rq.flags = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t req = ucp_ep_close_nbx(eps[r], &rq);
        if (UCS_PTR_IS_PTR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(w);
            ucp_request_free(req);
        }
    }
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
}

/* Forks `nprocs_` ranks (before anything touches UCX) that each run `body(dir)` and exit with
 * its result; waits for them. Returns 0 if every rank exited 0. */
static inline int run_ranks(const char *prog, int (*body)(const char *dir))
{
    char dir[] = "/tmp/tagspace-c.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    pid_t pids[MAX_PROCS];
    for (int r = 0; r < nprocs_; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            rank_ = r;
            alarm(3 * DEADLINE_S); /* a hung rank dies rather than hanging the run */
            exit(body(dir));
        }
        pids[r] = pid;
    }
    int failed = 0;
    for (int r = 0; r < nprocs_; r++) {
        int st = 0;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "%s: rank %d failed (%s %d)\n", prog, r,
                    WIFSIGNALED(st) ? "signal" : "exit status",
                    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            failed = 1;
        }
    }
    DIR *d = opendir(dir); /* the ranks' address, token and barrier files */
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
    return failed;
}

#endif
