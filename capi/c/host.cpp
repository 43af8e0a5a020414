// A C++17 host on its own UCX worker (plain libucp) using tagspace through tagspace.hpp: two
// processes, two tagspace libraries ("ucc", "dask": well-known ids) and the host's own random
// 64-bit tags, some forced into those libraries' namespace ids. Every receive is exact; each
// message must arrive exactly once where its tag says. Then host mode through tagspace::Node:
// tagspace adopts the same worker and endpoint, a dynamic name (a different id in each process)
// is routed by the handshake, and the host sends on its own endpoint with the routed tag.
//
//   tagspace-cpp-host [--rounds R]
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tagspace.hpp>
#include <ucp/api/ucp.h>

namespace {

constexpr uint64_t kMagic = 0x7461677370616365ull;
constexpr int kKinds = 3; // 0 ucc, 1 dask, 2 host random
constexpr auto kDeadline = std::chrono::seconds(90);

struct Msg {
    uint64_t magic;
    uint32_t kind, src, seq, pad;
};

struct Op {
    bool done = false;
    ucs_status_t status = UCS_OK;
    ucp_tag_recv_info_t info{};
    void *req = nullptr;
};

void ucs_check(ucs_status_t st, const char *what)
{
    if (st != UCS_OK) throw std::runtime_error(std::string(what) + ": " + ucs_status_string(st));
}

uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void start(ucs_status_ptr_t r, Op &op, const char *what)
{
    if (r == nullptr) {
        op.done = true;
    } else if (UCS_PTR_IS_ERR(r)) {
        throw std::runtime_error(std::string(what) + ": " + ucs_status_string(UCS_PTR_STATUS(r)));
    } else {
        op.req = r;
    }
}

void wait_all(ucp_worker_h w, std::vector<Op> &ops, const char *what)
{
    auto deadline = std::chrono::steady_clock::now() + kDeadline;
    for (auto &op : ops) {
        while (!op.done) {
            ucp_worker_progress(w);
            if (std::chrono::steady_clock::now() > deadline)
                throw std::runtime_error(std::string(what) + ": not done in time");
        }
        if (op.req) ucp_request_free(op.req);
        op.req = nullptr;
        ucs_check(op.status, what);
    }
}

ucp_request_param_t send_param(Op &op)
{
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = [](void *, ucs_status_t st, void *user) {
        auto *o = static_cast<Op *>(user);
        o->status = st;
        o->done = true;
    };
    p.user_data = &op;
    return p;
}

ucp_request_param_t recv_param(Op &op)
{
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_RECV_INFO;
    p.cb.recv = [](void *, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user) {
        auto *o = static_cast<Op *>(user);
        o->status = st;
        o->info = *info;
        o->done = true;
    };
    p.user_data = &op;
    p.recv_info.tag_info = &op.info;
    return p;
}

int rank_main(int rank, const std::string &dir, uint32_t rounds)
{
    const int peer = 1 - rank;
    auto reg = tagspace::Registry::global();
    tagspace::Namespace libs[2] = {reg.register_name("ucc"), reg.register_name("dask")};
    try {
        reg.register_name("ucc");
        throw std::runtime_error("a second \"ucc\" registration was accepted");
    } catch (const tagspace::Error &e) {
        if (e.status() != TAGSPACE_ERR_DUPLICATE_NAME) throw;
    }
    if (reg.check_foreign({0, 0}).size() != 255)
        throw std::runtime_error("random 64-bit tags should reach every managed namespace");

    auto tag_for = [&](int kind, uint32_t src, uint32_t seq) -> uint64_t {
        if (kind < 2) return libs[kind].tag((uint64_t(src) << 24) | seq);
        uint64_t t = mix((uint64_t(src) << 40) ^ seq);
        uint16_t forced = libs[seq % 2].id(); // inside a library's namespace, the worst case
        return (t & ~(0xffull << 56)) | (uint64_t(forced) << 56);
    };

    ucp_config_t *cfg = nullptr;
    ucs_check(ucp_config_read(nullptr, nullptr, &cfg), "ucp_config_read");
    ucp_params_t pp{};
    pp.field_mask = UCP_PARAM_FIELD_FEATURES;
    pp.features = UCP_FEATURE_TAG | UCP_FEATURE_AM; // AM: tagspace's control plane (host mode)
    ucp_context_h ctx = nullptr;
    ucs_check(ucp_init(&pp, cfg, &ctx), "ucp_init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h w = nullptr;
    ucs_check(ucp_worker_create(ctx, &wp, &w), "ucp_worker_create");

    ucp_address_t *addr = nullptr;
    size_t addr_len = 0;
    ucs_check(ucp_worker_get_address(w, &addr, &addr_len), "ucp_worker_get_address");
    const std::string mine = dir + "/addr." + std::to_string(rank), theirs = dir + "/addr." + std::to_string(peer);
    {
        std::ofstream(mine + ".tmp", std::ios::binary).write(reinterpret_cast<const char *>(addr), addr_len);
        if (std::rename((mine + ".tmp").c_str(), mine.c_str()) != 0) throw std::runtime_error("rename");
    }
    ucp_worker_release_address(w, addr);
    std::vector<char> peer_addr;
    for (auto deadline = std::chrono::steady_clock::now() + kDeadline; peer_addr.empty();) {
        std::ifstream in(theirs, std::ios::binary);
        if (in) peer_addr.assign(std::istreambuf_iterator<char>(in), {});
        else if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("peer never published");
        else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep_params.address = reinterpret_cast<const ucp_address_t *>(peer_addr.data());
    ucp_ep_h ep = nullptr;
    ucs_check(ucp_ep_create(w, &ep_params, &ep), "ucp_ep_create");

    const size_t n = size_t(rounds) * kKinds;
    std::vector<Msg> in(n), out(n);
    std::vector<Op> rops(n), sops(n);
    std::vector<uint64_t> expect(n);
    for (uint32_t s = 0, i = 0; s < rounds; s++)
        for (int k = 0; k < kKinds; k++, i++) {
            expect[i] = tag_for(k, peer, s);
            auto p = recv_param(rops[i]);
            start(ucp_tag_recv_nbx(w, &in[i], sizeof(Msg), expect[i], ~0ull, &p), rops[i], "ucp_tag_recv_nbx");
        }
    for (uint32_t s = 0, i = 0; s < rounds; s++)
        for (int j = 0; j < kKinds; j++, i++) {
            int k = kKinds - 1 - j; // reverse order: equal tags would swap messages
            out[i] = Msg{kMagic, uint32_t(k), uint32_t(rank), s, 0};
            auto p = send_param(sops[i]);
            start(ucp_tag_send_nbx(ep, &out[i], sizeof(Msg), tag_for(k, rank, s), &p), sops[i], "ucp_tag_send_nbx");
        }
    wait_all(w, sops, "sends");
    wait_all(w, rops, "receives");
    size_t bad = 0;
    for (uint32_t s = 0, i = 0; s < rounds; s++)
        for (int k = 0; k < kKinds; k++, i++) {
            const Msg &m = in[i];
            if (m.magic != kMagic || m.kind != uint32_t(k) || m.src != uint32_t(peer) || m.seq != s ||
                rops[i].info.sender_tag != expect[i])
                bad++;
        }

    // Barrier, then close without waiting on a peer that may be gone.
    std::vector<Op> barrier(2);
    uint64_t token = kMagic, got = 0;
    const uint64_t done_tag = 0x00000000fffffff0ull;
    auto rp = recv_param(barrier[0]);
    start(ucp_tag_recv_nbx(w, &got, sizeof got, done_tag | peer, ~0ull, &rp), barrier[0], "barrier recv");
    auto sp = send_param(barrier[1]);
    start(ucp_tag_send_nbx(ep, &token, sizeof token, done_tag | rank, &sp), barrier[1], "barrier send");
    wait_all(w, barrier, "barrier");

    // Host mode: tagspace on this worker and endpoint. "cpp.dynamic" gets a different id in
    // each process (one side registers another name first): only the handshake can route it.
    size_t routed = 0, routed_bad = 0;
    {
        auto node = tagspace::Node::adopt(w);
        if (rank == 1) node.register_name("cpp.padding");
        const uint32_t lib = node.register_name("cpp.dynamic");
        node.attach(ep, rank == 0 ? TAGSPACE_SIDE_INITIATOR : TAGSPACE_SIDE_ACCEPTOR);
        auto pump = [&] {
            ucp_worker_progress(w);
            node.progress();
        };
        const std::string tok = dir + "/token." + std::to_string(rank), peer_tok = dir + "/token." + std::to_string(peer);
        {
            std::ofstream(tok + ".tmp") << node.info().token;
            if (std::rename((tok + ".tmp").c_str(), tok.c_str()) != 0) throw std::runtime_error("rename");
        }
        uint64_t peer_token = 0;
        auto deadline = std::chrono::steady_clock::now() + kDeadline;
        while (!(std::ifstream(peer_tok) >> peer_token)) {
            pump();
            if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no peer token");
        }
        void *to = nullptr;
        uint64_t tag = 0;
        while (!node.try_route(lib, peer_token, 0, &to, &tag)) {
            pump();
            if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no route");
        }
        if (to != static_cast<void *>(ep)) throw std::runtime_error("the route is not the host's endpoint");
        std::vector<Msg> rin(rounds), rout(rounds);
        std::vector<Op> rr(rounds), rs(rounds);
        for (uint32_t s = 0; s < rounds; s++) {
            auto m = node.matcher(lib, peer_token, (uint64_t(peer) << 24) | s);
            auto p = recv_param(rr[s]);
            start(ucp_tag_recv_nbx(w, &rin[s], sizeof(Msg), m.tag, m.mask, &p), rr[s], "routed recv");
        }
        for (uint32_t s = 0; s < rounds; s++) {
            if (!node.try_route(lib, peer_token, (uint64_t(rank) << 24) | s, &to, &tag))
                throw std::runtime_error("route lost");
            rout[s] = Msg{kMagic, 7, uint32_t(rank), s, 0};
            auto p = send_param(rs[s]);
            start(ucp_tag_send_nbx(static_cast<ucp_ep_h>(to), &rout[s], sizeof(Msg), tag, &p), rs[s], "routed send");
        }
        wait_all(w, rs, "routed sends");
        wait_all(w, rr, "routed receives");
        for (uint32_t s = 0; s < rounds; s++, routed++)
            if (rin[s].magic != kMagic || rin[s].kind != 7 || rin[s].src != uint32_t(peer) || rin[s].seq != s)
                routed_bad++;
        std::vector<Op> b2(2);
        auto rp2 = recv_param(b2[0]);
        start(ucp_tag_recv_nbx(w, &got, sizeof got, (done_tag + 2) | peer, ~0ull, &rp2), b2[0], "barrier 2");
        auto sp2 = send_param(b2[1]);
        start(ucp_tag_send_nbx(ep, &token, sizeof token, (done_tag + 2) | rank, &sp2), b2[1], "barrier 2");
        wait_all(w, b2, "barrier 2");
        node.detach(ep);
    } // the node goes before the endpoint and the worker
    bad += routed_bad;

    ucp_tag_recv_info_t left{};
    ucp_worker_progress(w);
    const bool leftover = ucp_tag_probe_nb(w, 0, 0, 0, &left) != nullptr;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &cp);
    if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(w);
        ucp_request_free(r);
    }
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    std::printf("rank %d (C++): %zu messages (ucc id %u, dask id %u, host random tags inside them) "
                "+ %zu routed in host mode (dynamic name), misdelivered %zu, left over %d\n",
                rank, n, libs[0].id(), libs[1].id(), routed, bad, int(leftover));
    return bad == 0 && !leftover ? 0 : 1;
}

} // namespace

int main(int argc, char **argv)
{
    uint32_t rounds = 200;
    for (int a = 1; a < argc; a++) {
        if (!std::strcmp(argv[a], "--rounds") && a + 1 < argc) rounds = uint32_t(std::atoi(argv[++a]));
        else {
            std::fprintf(stderr, "usage: %s [--rounds R (1..100000)]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > 100000) {
        std::fprintf(stderr, "--rounds must be 1..100000\n");
        return 2;
    }
    if (tagspace_abi_version() != TAGSPACE_ABI_VERSION) {
        std::fprintf(stderr, "libtagspace ABI %u, header %u\n", tagspace_abi_version(), TAGSPACE_ABI_VERSION);
        return 1;
    }
    char dir[] = "/tmp/tagspace-cpp-host.XXXXXX";
    if (!mkdtemp(dir)) {
        std::perror("mkdtemp");
        return 1;
    }
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            std::perror("fork");
            return 1;
        }
        if (pids[r] == 0) {
            alarm(200);
            int rc = 1;
            try {
                rc = rank_main(r, dir, rounds);
            } catch (const std::exception &e) {
                std::fprintf(stderr, "rank %d: %s\n", r, e.what());
            }
            std::exit(rc);
        }
    }
    int failed = 0;
    for (int r = 0; r < 2; r++) {
        int st = 0;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
    }
    for (int r = 0; r < 2; r++)
        for (const char *f : {"/addr.", "/token."}) unlink((std::string(dir) + f + std::to_string(r)).c_str());
    rmdir(dir);
    std::printf("%s: 2 processes, %u rounds: %s\n", argv[0], rounds, failed ? "FAILED" : "ok");
    return failed;
}
