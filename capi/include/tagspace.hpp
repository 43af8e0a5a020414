// tagspace for C++17: RAII handles over the C ABI of tagspace.h (header-only, no other
// dependency). Errors throw tagspace::Error, which carries the status code and the message that
// names what was wrong; release and free happen in destructors.
//
//   auto reg = tagspace::Registry::global();
//   tagspace::Namespace raft = reg.register_name("raft");       // well-known id 6
//   uint64_t tag = raft.tag(payload);                           // for ucp_tag_send_nbx
//   tagspace_matcher_t m = raft.matcher_exact(payload);         // for ucp_tag_recv_nbx
#ifndef TAGSPACE_HPP
#define TAGSPACE_HPP

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tagspace.h"

namespace tagspace {

// A failed call: `status()` is the TAGSPACE_ERR_* code, `what()` the full message.
class Error : public std::runtime_error {
  public:
    Error(tagspace_status_t status, const std::string &msg) : std::runtime_error(msg), status_(status) {}
    tagspace_status_t status() const noexcept { return status_; }

  private:
    tagspace_status_t status_;
};

namespace detail {
inline void check(tagspace_status_t rc, const char *call)
{
    if (rc == TAGSPACE_OK) return;
    std::string msg(tagspace_last_error(nullptr, 0) + 1, '\0');
    msg.resize(tagspace_last_error(&msg[0], msg.size()));
    throw Error(rc, std::string(call) + ": " + tagspace_strerror(rc) + ": " + msg);
}
} // namespace detail

// A live namespace registration; the id goes back to the registry when it is destroyed.
class Namespace {
  public:
    explicit Namespace(tagspace_namespace_t *ns) noexcept : ns_(ns) {}
    Namespace(Namespace &&o) noexcept : ns_(std::exchange(o.ns_, nullptr)) {}
    Namespace &operator=(Namespace &&o) noexcept
    {
        if (this != &o) {
            tagspace_release(ns_);
            ns_ = std::exchange(o.ns_, nullptr);
        }
        return *this;
    }
    Namespace(const Namespace &) = delete;
    Namespace &operator=(const Namespace &) = delete;
    ~Namespace() { tagspace_release(ns_); }

    uint16_t id() const
    {
        uint16_t v = 0;
        detail::check(tagspace_namespace_id(ns_, &v), "tagspace_namespace_id");
        return v;
    }
    std::string name() const
    {
        std::string s(TAGSPACE_MAX_NAME_LEN + 1, '\0');
        s.resize(tagspace_namespace_name(ns_, &s[0], s.size()));
        return s;
    }
    uint64_t tag(uint64_t payload) const
    {
        uint64_t t = 0;
        detail::check(tagspace_tag(ns_, payload, &t), "tagspace_tag");
        return t;
    }
    uint64_t inbox_tag() const
    {
        uint64_t t = 0;
        detail::check(tagspace_inbox_tag(ns_, &t), "tagspace_inbox_tag");
        return t;
    }
    tagspace_matcher_t matcher_exact(uint64_t payload) const
    {
        tagspace_matcher_t m{};
        detail::check(tagspace_matcher_exact(ns_, payload, &m), "tagspace_matcher_exact");
        return m;
    }
    tagspace_matcher_t matcher(uint64_t payload, uint64_t payload_mask) const
    {
        tagspace_matcher_t m{};
        detail::check(tagspace_matcher(ns_, payload, payload_mask, &m), "tagspace_matcher");
        return m;
    }
    tagspace_matcher_t matcher_any() const
    {
        tagspace_matcher_t m{};
        detail::check(tagspace_matcher_any(ns_, &m), "tagspace_matcher_any");
        return m;
    }
    uint16_t am_id(uint16_t local) const
    {
        uint16_t v = 0;
        detail::check(tagspace_am_id(ns_, local, &v), "tagspace_am_id");
        return v;
    }
    bool owns(uint64_t tag) const noexcept { return tagspace_owns(ns_, tag) != 0; }
    uint64_t payload_of(uint64_t tag) const noexcept { return tagspace_payload_of(ns_, tag); }
    tagspace_namespace_t *get() const noexcept { return ns_; }

  private:
    tagspace_namespace_t *ns_;
};

// A registry handle: the process-global registry, or a private one with its own layout.
class Registry {
  public:
    static Registry global()
    {
        tagspace_registry_t *r = nullptr;
        detail::check(tagspace_registry_global(&r), "tagspace_registry_global");
        return Registry(r);
    }
    static Registry with_layout(uint32_t namespace_shift, uint32_t namespace_width, bool well_known = true)
    {
        tagspace_layout_options_t o;
        tagspace_layout_options_init(&o);
        o.namespace_shift = namespace_shift;
        o.namespace_width = namespace_width;
        o.well_known = well_known ? 1 : 0;
        tagspace_registry_t *r = nullptr;
        detail::check(tagspace_registry_new(&o, &r), "tagspace_registry_new");
        return Registry(r);
    }
    Registry(Registry &&o) noexcept : reg_(std::exchange(o.reg_, nullptr)) {}
    Registry &operator=(Registry &&o) noexcept
    {
        if (this != &o) {
            tagspace_registry_free(reg_);
            reg_ = std::exchange(o.reg_, nullptr);
        }
        return *this;
    }
    Registry(const Registry &) = delete;
    Registry &operator=(const Registry &) = delete;
    ~Registry() { tagspace_registry_free(reg_); }

    // `register` is a C++ keyword.
    Namespace register_name(const std::string &name) const
    {
        tagspace_namespace_t *ns = nullptr;
        detail::check(tagspace_register(reg_, name.c_str(), &ns), "tagspace_register");
        return Namespace(ns);
    }
    Namespace register_at(const std::string &name, uint16_t id) const
    {
        tagspace_namespace_t *ns = nullptr;
        detail::check(tagspace_register_at(reg_, name.c_str(), id, &ns), "tagspace_register_at");
        return Namespace(ns);
    }
    tagspace_registry_info_t info() const
    {
        tagspace_registry_info_t i{};
        i.struct_size = sizeof i;
        detail::check(tagspace_registry_info(reg_, &i), "tagspace_registry_info");
        return i;
    }
    tagspace_decoded_t decode(uint64_t tag) const
    {
        tagspace_decoded_t d{};
        detail::check(tagspace_decode(reg_, tag, &d), "tagspace_decode");
        return d;
    }
    // The namespace ids (other than 0) a foreign library's tag pattern can reach.
    std::vector<uint16_t> check_foreign(tagspace_matcher_t pattern) const
    {
        size_t n = 0;
        detail::check(tagspace_check_foreign(reg_, pattern, nullptr, 0, &n), "tagspace_check_foreign");
        std::vector<uint16_t> ids(n);
        detail::check(tagspace_check_foreign(reg_, pattern, ids.data(), ids.size(), &n), "tagspace_check_foreign");
        ids.resize(n);
        return ids;
    }
    tagspace_registry_t *get() const noexcept { return reg_; }

  private:
    explicit Registry(tagspace_registry_t *r) noexcept : reg_(r) {}
    tagspace_registry_t *reg_;
};

// tagspace on a host's own worker and endpoints (host mode). The host keeps its worker and
// endpoints (tagspace never destroys or closes them); destroy the Node before the worker, and
// detach each endpoint before closing it. On a UCS_THREAD_MODE_MULTI worker any thread may use
// the Node at once (from inside a UCX callback only peer_failed); otherwise one at a time.
//
//   auto node = tagspace::Node::adopt(worker);                   // the host keeps progressing
//   uint32_t lib = node.register_name("shuffle");
//   node.attach(ep, rank < peer_rank ? TAGSPACE_SIDE_INITIATOR : TAGSPACE_SIDE_ACCEPTOR);
//   void *to; uint64_t tag;
//   if (node.try_route(lib, peer_token, payload, &to, &tag))     // ucp_tag_send_nbx(to, ..., tag)
class Node {
  public:
    static Node adopt(void *ucp_worker, uint32_t progress = TAGSPACE_PROGRESS_HOST,
                      const Registry *reg = nullptr)
    {
        tagspace_node_options_t o;
        tagspace_node_options_init(&o);
        o.progress = progress;
        tagspace_node_t *n = nullptr;
        int ucs = 0;
        detail::check(tagspace_node_adopt(ucp_worker, reg ? reg->get() : nullptr, &o, &n, &ucs),
                      "tagspace_node_adopt");
        return Node(n);
    }
    Node(Node &&o) noexcept : node_(std::exchange(o.node_, nullptr)) {}
    Node &operator=(Node &&o) noexcept
    {
        if (this != &o) {
            tagspace_node_free(node_);
            node_ = std::exchange(o.node_, nullptr);
        }
        return *this;
    }
    Node(const Node &) = delete;
    Node &operator=(const Node &) = delete;
    ~Node() { tagspace_node_free(node_); }

    void attach(void *ucp_ep, uint32_t side)
    {
        detail::check(tagspace_node_attach(node_, ucp_ep, side), "tagspace_node_attach");
    }
    /// Attaches an endpoint the host connected to where the lost `peer` said it listens.
    void attach_reconnect(void *ucp_ep, uint64_t peer)
    {
        detail::check(tagspace_node_attach_reconnect(node_, ucp_ep, peer), "tagspace_node_attach_reconnect");
    }
    /// Tells peers where to connect again after a fault ("IP:PORT", this host's listener).
    void advertise(const std::string &address)
    {
        detail::check(tagspace_node_advertise(node_, address.c_str()), "tagspace_node_advertise");
    }
    /// The next peer lost to a fault to connect to again (`needed` 0: none).
    tagspace_reconnect_t take_reconnect()
    {
        tagspace_reconnect_t r{};
        r.struct_size = sizeof r;
        detail::check(tagspace_node_take_reconnect(node_, &r), "tagspace_node_take_reconnect");
        return r;
    }
    void detach(void *ucp_ep) { detail::check(tagspace_node_detach(node_, ucp_ep), "tagspace_node_detach"); }
    void peer_failed(void *ucp_ep, int ucs_status)
    {
        detail::check(tagspace_node_peer_failed(node_, ucp_ep, ucs_status), "tagspace_node_peer_failed");
    }
    bool progress()
    {
        int busy = 0;
        detail::check(tagspace_node_progress(node_, &busy), "tagspace_node_progress");
        return busy != 0;
    }
    void shutdown(uint32_t timeout_ms)
    {
        detail::check(tagspace_node_shutdown(node_, timeout_ms), "tagspace_node_shutdown");
    }
    uint32_t register_name(const std::string &name)
    {
        uint32_t lib = 0;
        detail::check(tagspace_node_register(node_, name.c_str(), &lib), "tagspace_node_register");
        return lib;
    }
    void release(uint32_t lib) { detail::check(tagspace_node_release(node_, lib), "tagspace_node_release"); }
    void listen(uint32_t lib) { detail::check(tagspace_node_listen(node_, lib), "tagspace_node_listen"); }
    // The host's endpoint and the tag for `payload` to `lib` on `peer`; false while the
    // handshake with the peer or its announcement of the name is still to come.
    bool try_route(uint32_t lib, uint64_t peer, uint64_t payload, void **ucp_ep, uint64_t *tag) const
    {
        tagspace_status_t rc = tagspace_node_route(node_, lib, peer, payload, ucp_ep, tag);
        if (rc == TAGSPACE_ERR_NOT_CONNECTED || rc == TAGSPACE_ERR_NOT_ANNOUNCED) return false;
        detail::check(rc, "tagspace_node_route");
        return true;
    }
    // The exact matcher for `payload` to `lib` here from `peer` (only `peer`'s messages match).
    tagspace_matcher_t matcher(uint32_t lib, uint64_t peer, uint64_t payload) const
    {
        tagspace_matcher_t m{};
        detail::check(tagspace_node_matcher(node_, lib, peer, payload, &m), "tagspace_node_matcher");
        return m;
    }
    // The matcher for `payload` to `lib` here from any peer (the pair field free): check what it
    // takes with sender_of.
    tagspace_matcher_t matcher_any_peer(uint32_t lib, uint64_t payload) const
    {
        tagspace_matcher_t m{};
        detail::check(tagspace_node_matcher_any_peer(node_, lib, payload, &m),
                      "tagspace_node_matcher_any_peer");
        return m;
    }
    // The proven peer that sent a message with `tag`; false for a tag no proven peer can have
    // made (drop the message).
    bool sender_of(uint64_t tag, uint64_t *peer) const
    {
        tagspace_status_t rc = tagspace_node_sender_of(node_, tag, peer);
        if (rc == TAGSPACE_ERR_NOT_FOUND) return false;
        detail::check(rc, "tagspace_node_sender_of");
        return true;
    }
    tagspace_peer_event_t poll_event(uint32_t lib)
    {
        tagspace_peer_event_t ev{};
        detail::check(tagspace_node_poll_event(node_, lib, &ev), "tagspace_node_poll_event");
        return ev;
    }
    tagspace_node_info_t info() const
    {
        tagspace_node_info_t i{};
        i.struct_size = sizeof i;
        detail::check(tagspace_node_info(node_, &i), "tagspace_node_info");
        return i;
    }
    tagspace_node_stats_t stats() const
    {
        tagspace_node_stats_t s{};
        s.struct_size = sizeof s;
        detail::check(tagspace_node_stats(node_, &s), "tagspace_node_stats");
        return s;
    }
    tagspace_node_t *get() const noexcept { return node_; }

  private:
    explicit Node(tagspace_node_t *n) noexcept : node_(n) {}
    tagspace_node_t *node_;
};

} // namespace tagspace

#endif // TAGSPACE_HPP
