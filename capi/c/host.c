/* A C host that owns its UCX context, worker and endpoints (plain libucp, as ucxx or UCC do)
 * and keeps three libraries' traffic apart with tagspace's C ABI, next to its own raw traffic.
 *
 *   tagspace-c-host [--procs N] [--rounds R]      (N processes, 2..16; R messages per kind)
 *
 * The parent forks N ranks before touching UCX. Each rank publishes its worker address in a
 * private temporary directory, connects to every other rank, and then every rank sends every
 * other rank R messages of each kind:
 *   0 "raft"      tagspace namespace, well-known id 6
 *   1 "ucc"       tagspace namespace, well-known id 8
 *   2 "host.lib"  tagspace namespace, static id 40 (tagspace_register_at, same in every rank)
 *   3 host tags as ucxx's Python layer makes them: random 64-bit values (hashes); one in three
 *     is forced into raft's namespace id and one in three into host.lib's, the worst case
 *   4 host tags as RAFT's comms make them: (seq << 31) | rank, the top 32 bits zero
 *   5 Active Messages on id 0 (ucxx's AM id) with the host's own handler
 *   6 Active Messages on raft's tagspace AM id (tagspace_am_id(raft, 1))
 * Receives are exact (full mask), as the coexistence rules require on a worker shared with
 * random-tag traffic. Every payload carries (kind, src, dst, seq, tag); a receive or AM handler
 * that gets another kind's, source's or sequence's message counts it as misdelivered. The rank
 * fails unless every message arrived exactly once at the right place and nothing is left over.
 * Exit status: 0 if every rank passed. */
#include "common.h"

#define MAGIC 0x7461677370616365ull /* "tagspace" */
#define KINDS_TAG 5                 /* kinds 0..4 travel as tag messages */
#define KIND_AM0 5
#define KIND_AM_RAFT 6
#define KINDS 7
#define STATIC_ID 40
/* The barrier's tag from `src` to `dst`: namespace 0, low 31 bits never a rank. */
#define DONE_TAG(src, dst) ((((uint64_t)(dst) + 1) << 40) | 0x7fffff00u | (uint64_t)(src))

typedef struct {
    uint64_t magic;
    uint32_t kind, src, dst, seq;
    uint64_t tag; /* the tag (or AM id) it was sent with */
} msg_t;

static const char *kind_name[KINDS] = {"raft", "ucc", "host.lib", "host-random",
                                       "host-raft-style", "am-id-0", "am-raft"};

static tagspace_namespace_t *ns_[3];
static uint16_t am_raft_;
/* AM receptions per source and kind, and misdeliveries seen by the handlers. */
static uint32_t am_seen_[MAX_PROCS][2];
static uint64_t am_bad_;
static uint32_t rounds_;
static uint8_t *am_got_; /* [src][kind-5][seq] */

static uint64_t mix(uint64_t x)
{ /* splitmix64: stands in for ucxx's SHA-1-derived tags */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The tag a message of `kind` from `src` to `dst` number `seq` is sent with. */
static uint64_t tag_for(int kind, uint32_t src, uint32_t dst, uint32_t seq)
{
    uint64_t t = 0;
    switch (kind) {
    case 0:
    case 1:
    case 2:
        ts_check(tagspace_tag(ns_[kind], ((uint64_t)src << 25) | ((uint64_t)dst << 18) | seq, &t),
                 "tagspace_tag");
        return t;
    case 3:
        t = mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ seq);
        if (seq % 3 == 0) t = (t & ~(0xffull << 56)) | (6ull << 56); /* inside raft's id */
        if (seq % 3 == 1) t = (t & ~(0xffull << 56)) | ((uint64_t)STATIC_ID << 56);
        return t;
    default:
        return ((uint64_t)(seq + dst * rounds_) << 31) | src;
    }
}

static void am_check(uint32_t kind, const void *data, size_t len, uint64_t am_id)
{
    msg_t m;
    if (len != sizeof m) {
        am_bad_++;
        return;
    }
    memcpy(&m, data, sizeof m);
    if (m.magic != MAGIC || m.kind != kind || m.dst != (uint32_t)rank_ || m.src >= (uint32_t)nprocs_ ||
        m.seq >= rounds_ || m.tag != am_id) {
        am_bad_++;
        return;
    }
    uint8_t *got = &am_got_[(m.src * 2 + (kind - KIND_AM0)) * rounds_ + m.seq];
    if (*got) am_bad_++; /* a duplicate */
    *got = 1;
    am_seen_[m.src][kind - KIND_AM0]++;
}

static ucs_status_t am0_cb(void *arg, const void *header, size_t header_length, void *data,
                           size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)header_length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) am_bad_++;
    else am_check(KIND_AM0, data, length, 0);
    return UCS_OK;
}

static ucs_status_t am_raft_cb(void *arg, const void *header, size_t header_length, void *data,
                               size_t length, const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)header_length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) am_bad_++;
    else am_check(KIND_AM_RAFT, data, length, am_raft_);
    return UCS_OK;
}

static void set_am_handler(ucp_worker_h w, uint16_t id, ucp_am_recv_callback_t cb)
{
    ucp_am_handler_param_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB;
    p.id = id;
    p.cb = cb;
    ucs_check(ucp_worker_set_am_recv_handler(w, &p), "ucp_worker_set_am_recv_handler");
}

static int rank_main(const char *dir)
{
    /* tagspace: three libraries in this process, on the process-global registry. */
    if (tagspace_abi_version() != TAGSPACE_ABI_VERSION)
        DIE("libtagspace speaks ABI %u, this program was built for %u", tagspace_abi_version(),
            TAGSPACE_ABI_VERSION);
    tagspace_registry_t *reg;
    ts_check(tagspace_registry_global(&reg), "tagspace_registry_global");
    ts_check(tagspace_register(reg, "raft", &ns_[0]), "register raft");
    ts_check(tagspace_register(reg, "ucc", &ns_[1]), "register ucc");
    ts_check(tagspace_register_at(reg, "host.lib", STATIC_ID, &ns_[2]), "register host.lib");
    ts_check(tagspace_am_id(ns_[0], 1, &am_raft_), "tagspace_am_id");
    uint16_t ids[3];
    for (int k = 0; k < 3; k++) ts_check(tagspace_namespace_id(ns_[k], &ids[k]), "namespace_id");
    if (ids[0] != 6 || ids[1] != 8 || ids[2] != STATIC_ID) DIE("unexpected ids %u %u %u", ids[0], ids[1], ids[2]);
    if (am_raft_ == 0) DIE("tagspace handed out AM id 0");

    /* The coexistence rule, checked the way a host would at start-up: random 64-bit tags can
     * land in every namespace (so tagspace receives must be exact); RAFT-style tags in none. */
    size_t hits = 0, raft_hits = 1;
    tagspace_matcher_t any = {0, 0}, raft_style = {0, 0xffffffff00000000ull};
    ts_check(tagspace_check_foreign(reg, any, NULL, 0, &hits), "check_foreign");
    ts_check(tagspace_check_foreign(reg, raft_style, NULL, 0, &raft_hits), "check_foreign");
    if (hits != 255 || raft_hits != 0) DIE("check_foreign: random %zu, raft-style %zu", hits, raft_hits);

    /* Beside rapidsmpf (its recv_any probes reach tags with bits 23..31 zero): the default
     * layout is in its reach; the layout `tagspace layout --against rapidsmpf` prints is not. */
    tagspace_matcher_t rapidsmpf = {0, 0xff800000ull};
    size_t in_reach = 0;
    ts_check(tagspace_check_foreign(reg, rapidsmpf, NULL, 0, &in_reach), "check_foreign");
    if (in_reach == 0) DIE("the default layout should be in rapidsmpf's reach");
    tagspace_layout_options_t opts;
    tagspace_layout_options_init(&opts);
    if (tagspace_layout_options_from_spec(&opts, "ns=56:8,seq=0:8") != TAGSPACE_ERR_BAD_LAYOUT)
        DIE("a spec with a named field should be refused");
    if (tagspace_layout_options_from_spec(&opts, "ns=56:8,guard=0x1/0x0") != TAGSPACE_ERR_BAD_LAYOUT)
        DIE("a guard value outside its mask should be refused");
    ts_check(tagspace_layout_options_from_spec(&opts, "ns=56:8,pair=32:24,guard=0x80000000/0x80000000"),
             "tagspace_layout_options_from_spec");
    tagspace_registry_t *guarded;
    ts_check(tagspace_registry_new(&opts, &guarded), "tagspace_registry_new");
    ts_check(tagspace_check_foreign(guarded, rapidsmpf, NULL, 0, &in_reach), "check_foreign");
    if (in_reach != 0) DIE("the guarded layout is in rapidsmpf's reach (%zu ids)", in_reach);
    tagspace_registry_info_t info = {.struct_size = sizeof info};
    ts_check(tagspace_registry_info(guarded, &info), "tagspace_registry_info");
    if (info.guard_mask != 0x80000000ull || info.guard_value != 0x80000000ull)
        DIE("guard bits %llx/%llx", (unsigned long long)info.guard_value,
            (unsigned long long)info.guard_mask);
    tagspace_registry_free(guarded);

    /* UCX: the host's own context, worker and endpoints. */
    ucp_context_h ctx;
    ucp_worker_h w;
    ucx_open(UCP_FEATURE_TAG | UCP_FEATURE_AM, &ctx, &w);
    if (rank_ == 0) printf("host UCX %s\n", ucp_get_version_string());
    set_am_handler(w, 0, am0_cb);
    set_am_handler(w, am_raft_, am_raft_cb);
    ucp_ep_h eps[MAX_PROCS];
    connect_all(dir, w, eps);

    size_t peers = nprocs_ - 1;
    size_t nrecv = peers * rounds_ * KINDS_TAG;
    size_t nsend = peers * rounds_ * KINDS;
    msg_t *rbuf = calloc(nrecv, sizeof(msg_t));
    msg_t *sbuf = calloc(nsend, sizeof(msg_t));
    pending_t *rp = calloc(nrecv, sizeof(pending_t));
    pending_t *sp = calloc(nsend, sizeof(pending_t));
    uint64_t *rtag = calloc(nrecv, sizeof(uint64_t));
    am_got_ = calloc((size_t)nprocs_ * 2 * rounds_, 1);
    if (!rbuf || !sbuf || !rp || !sp || !rtag || !am_got_) DIE("out of memory");

    /* Post every receive first (exact tags), then send. */
    size_t i = 0;
    for (int p = 0; p < nprocs_; p++) {
        if (p == rank_) continue;
        for (uint32_t s = 0; s < rounds_; s++)
            for (int k = 0; k < KINDS_TAG; k++, i++) {
                ucp_request_param_t rq = recv_param(&rp[i]);
                rtag[i] = tag_for(k, p, rank_, s);
                start(ucp_tag_recv_nbx(w, &rbuf[i], sizeof(msg_t), rtag[i], ~0ull, &rq), &rp[i],
                      "ucp_tag_recv_nbx");
            }
    }
    i = 0;
    for (uint32_t s = 0; s < rounds_; s++)
        for (int p = 0; p < nprocs_; p++) {
            if (p == rank_) continue;
            /* Kinds go out in the reverse of the order their receives were posted in: were two
             * kinds' tags ever equal, each would take the other's message. */
            for (int j = 0; j < KINDS; j++, i++) {
                int k = KINDS - 1 - j;
                msg_t *m = &sbuf[i];
                m->magic = MAGIC;
                m->kind = k;
                m->src = rank_;
                m->dst = p;
                m->seq = s;
                ucp_request_param_t rq = send_param(&sp[i]);
                if (k < KINDS_TAG) {
                    m->tag = tag_for(k, rank_, p, s);
                    start(ucp_tag_send_nbx(eps[p], m, sizeof *m, m->tag, &rq), &sp[i], "ucp_tag_send_nbx");
                } else {
                    uint16_t id = k == KIND_AM0 ? 0 : am_raft_;
                    m->tag = id;
                    rq.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
                    rq.flags = UCP_AM_SEND_FLAG_EAGER;
                    start(ucp_am_send_nbx(eps[p], id, NULL, 0, m, sizeof *m, &rq), &sp[i], "ucp_am_send_nbx");
                }
            }
        }
    wait_all(w, sp, nsend, "sends");
    wait_all(w, rp, nrecv, "tag receives");
    double deadline = now_s() + DEADLINE_S;
    for (int p = 0; p < nprocs_; p++) {
        if (p == rank_) continue;
        while (am_seen_[p][0] + am_seen_[p][1] < 2 * rounds_ && am_bad_ == 0) {
            ucp_worker_progress(w);
            if (now_s() > deadline) DIE("Active Messages from rank %d: %u of %u", p, am_seen_[p][0] + am_seen_[p][1], 2 * rounds_);
        }
    }

    /* Every tag receive got exactly the message its tag was built for. */
    uint64_t bad = am_bad_, per_kind[KINDS] = {0};
    i = 0;
    for (int p = 0; p < nprocs_; p++) {
        if (p == rank_) continue;
        for (uint32_t s = 0; s < rounds_; s++)
            for (int k = 0; k < KINDS_TAG; k++, i++) {
                msg_t *m = &rbuf[i];
                if (m->magic != MAGIC || m->kind != (uint32_t)k || m->src != (uint32_t)p ||
                    m->dst != (uint32_t)rank_ || m->seq != s || m->tag != rtag[i] ||
                    rp[i].info.sender_tag != rtag[i] || rp[i].info.length != sizeof *m) {
                    if (bad < 5)
                        fprintf(stderr, "rank %d: receive for %s from %d #%u (tag %#" PRIx64 ") got kind %u from %u #%u\n",
                                rank_, kind_name[k], p, s, rtag[i], m->kind, m->src, m->seq);
                    bad++;
                } else {
                    per_kind[k]++;
                }
            }
        per_kind[KIND_AM0] += am_seen_[p][0];
        per_kind[KIND_AM_RAFT] += am_seen_[p][1];
    }

    /* Barrier: each rank tells every other that it has everything, so no one closes while a
     * peer still waits for its messages. The tags live in namespace 0 and differ from every
     * RAFT-style tag above in their low 31 bits. */
    pending_t done_r[MAX_PROCS], done_s[MAX_PROCS];
    uint64_t done_buf[MAX_PROCS], done_val = MAGIC;
    size_t nd = 0;
    for (int p = 0; p < nprocs_; p++) {
        if (p == rank_) continue;
        ucp_request_param_t rq = recv_param(&done_r[nd]);
        start(ucp_tag_recv_nbx(w, &done_buf[nd], sizeof done_buf[nd], DONE_TAG(p, rank_), ~0ull, &rq),
              &done_r[nd], "ucp_tag_recv_nbx (barrier)");
        rq = send_param(&done_s[nd]);
        start(ucp_tag_send_nbx(eps[p], &done_val, sizeof done_val, DONE_TAG(rank_, p), &rq), &done_s[nd],
              "ucp_tag_send_nbx (barrier)");
        nd++;
    }
    wait_all(w, done_s, nd, "barrier sends");
    wait_all(w, done_r, nd, "barrier receives");

    /* Nothing unexpected is left on the worker (a message nobody asked for would sit here). */
    ucp_worker_progress(w);
    ucp_tag_recv_info_t left;
    int leftover = ucp_tag_probe_nb(w, 0, 0, 0, &left) != NULL;

    printf("rank %d: %zu messages sent, %zu received exactly once at the right place "
           "(raft %" PRIu64 ", ucc %" PRIu64 ", host.lib %" PRIu64 ", host random %" PRIu64
           ", host raft-style %" PRIu64 ", AM id 0 %" PRIu64 ", AM raft %" PRIu64 "); misdelivered %" PRIu64
           ", left over %d\n",
           rank_, nsend, nsend - (size_t)bad, per_kind[0], per_kind[1], per_kind[2], per_kind[3],
           per_kind[4], per_kind[5], per_kind[6], bad, leftover);
    fflush(stdout);

    close_all(ctx, w, eps); /* everyone has everything: the barrier saw to it */
    for (int k = 0; k < 3; k++) tagspace_release(ns_[k]);
    tagspace_registry_free(reg);
    return bad == 0 && !leftover ? 0 : 1;
}

int main(int argc, char **argv)
{
    nprocs_ = 3;
    rounds_ = 100;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--procs") && a + 1 < argc) nprocs_ = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--rounds") && a + 1 < argc) rounds_ = (uint32_t)atoi(argv[++a]);
        else {
            fprintf(stderr, "usage: %s [--procs N (2..%d)] [--rounds R (1..100000)]\n", argv[0], MAX_PROCS);
            return 2;
        }
    }
    if (nprocs_ < 2 || nprocs_ > MAX_PROCS || rounds_ < 1 || rounds_ > 100000) {
        fprintf(stderr, "--procs must be 2..%d and --rounds 1..100000\n", MAX_PROCS);
        return 2;
    }
    int failed = run_ranks(argv[0], rank_main);
    printf("%s: %d processes, %u rounds: %s\n", argv[0], nprocs_, rounds_, failed ? "FAILED" : "ok");
    return failed;
}
