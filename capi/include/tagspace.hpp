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

} // namespace tagspace

#endif // TAGSPACE_HPP
