//! UCX status codes as one error type that names the status.

use std::fmt;
use ucx1_sys as sys;

/// A UCX status code (`ucs_status_t`), kept as its integer so that any value UCX returns is
/// representable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status(i8);

macro_rules! statuses {
    ($($konst:ident = $code:expr, $name:literal;)*) => {
        impl Status {
            $(
                #[doc = concat!("`", $name, "`")]
                pub const $konst: Status = Status($code);
            )*

            /// UCX's name for the status, e.g. `"UCS_ERR_CONNECTION_RESET"`.
            pub fn name(self) -> &'static str {
                match self.0 {
                    $($code => $name,)*
                    -59..=-40 => "UCS_ERR_LINK_FAILURE",
                    -89..=-60 => "UCS_ERR_ENDPOINT_FAILURE",
                    _ => "UCS_ERR_UNKNOWN",
                }
            }
        }
    };
}

statuses! {
    OK = 0, "UCS_OK";
    INPROGRESS = 1, "UCS_INPROGRESS";
    NO_MESSAGE = -1, "UCS_ERR_NO_MESSAGE";
    NO_RESOURCE = -2, "UCS_ERR_NO_RESOURCE";
    IO_ERROR = -3, "UCS_ERR_IO_ERROR";
    NO_MEMORY = -4, "UCS_ERR_NO_MEMORY";
    INVALID_PARAM = -5, "UCS_ERR_INVALID_PARAM";
    UNREACHABLE = -6, "UCS_ERR_UNREACHABLE";
    INVALID_ADDR = -7, "UCS_ERR_INVALID_ADDR";
    NOT_IMPLEMENTED = -8, "UCS_ERR_NOT_IMPLEMENTED";
    MESSAGE_TRUNCATED = -9, "UCS_ERR_MESSAGE_TRUNCATED";
    NO_PROGRESS = -10, "UCS_ERR_NO_PROGRESS";
    BUFFER_TOO_SMALL = -11, "UCS_ERR_BUFFER_TOO_SMALL";
    NO_ELEM = -12, "UCS_ERR_NO_ELEM";
    SOME_CONNECTS_FAILED = -13, "UCS_ERR_SOME_CONNECTS_FAILED";
    NO_DEVICE = -14, "UCS_ERR_NO_DEVICE";
    BUSY = -15, "UCS_ERR_BUSY";
    CANCELED = -16, "UCS_ERR_CANCELED";
    SHMEM_SEGMENT = -17, "UCS_ERR_SHMEM_SEGMENT";
    ALREADY_EXISTS = -18, "UCS_ERR_ALREADY_EXISTS";
    OUT_OF_RANGE = -19, "UCS_ERR_OUT_OF_RANGE";
    TIMED_OUT = -20, "UCS_ERR_TIMED_OUT";
    EXCEEDS_LIMIT = -21, "UCS_ERR_EXCEEDS_LIMIT";
    UNSUPPORTED = -22, "UCS_ERR_UNSUPPORTED";
    REJECTED = -23, "UCS_ERR_REJECTED";
    NOT_CONNECTED = -24, "UCS_ERR_NOT_CONNECTED";
    CONNECTION_RESET = -25, "UCS_ERR_CONNECTION_RESET";
    ENDPOINT_TIMEOUT = -80, "UCS_ERR_ENDPOINT_TIMEOUT";
}

impl Status {
    pub(crate) fn from_sys(s: sys::ucs_status_t) -> Status {
        Status(s as i8)
    }

    /// The status with UCX code `c` (`ucs_status_t` is a signed byte), e.g. one a host's
    /// endpoint error handler was given.
    pub fn from_code(c: i8) -> Status {
        Status(c)
    }

    /// The raw code.
    pub fn code(self) -> i8 {
        self.0
    }

    /// `UCS_OK`.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// The peer is gone or unreachable (reset, timeout, link or endpoint failure, rejected).
    pub fn is_peer_failure(self) -> bool {
        matches!(self.0, -25 | -24 | -23 | -20 | -6 | -3) || (-89..=-40).contains(&self.0)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A UCX call failed: which operation, and UCX's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UcxError {
    /// The UCX call or operation kind (`"ucp_ep_create (sockaddr)"`, `"send"`, ...).
    pub op: &'static str,
    /// UCX's status.
    pub status: Status,
}

impl fmt::Display for UcxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.status.name())?;
        if self.status.is_peer_failure() {
            f.write_str(" (peer failed or closed)")?;
        }
        Ok(())
    }
}

impl std::error::Error for UcxError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ranges() {
        assert_eq!(Status::CONNECTION_RESET.name(), "UCS_ERR_CONNECTION_RESET");
        assert_eq!(Status(-45).name(), "UCS_ERR_LINK_FAILURE");
        assert_eq!(Status(-70).name(), "UCS_ERR_ENDPOINT_FAILURE");
        assert_eq!(Status(-99).name(), "UCS_ERR_UNKNOWN");
        assert!(Status::ENDPOINT_TIMEOUT.is_peer_failure());
        assert!(!Status::CANCELED.is_peer_failure());
        let e = UcxError {
            op: "send",
            status: Status::CONNECTION_RESET,
        };
        assert_eq!(
            e.to_string(),
            "send: UCS_ERR_CONNECTION_RESET (peer failed or closed)"
        );
    }

    #[test]
    fn ucx_statuses_have_names() {
        for s in [
            sys::ucs_status_t::UCS_OK,
            sys::ucs_status_t::UCS_ERR_CANCELED,
            sys::ucs_status_t::UCS_ERR_CONNECTION_RESET,
            sys::ucs_status_t::UCS_ERR_ENDPOINT_TIMEOUT,
            sys::ucs_status_t::UCS_ERR_MESSAGE_TRUNCATED,
        ] {
            assert_ne!(Status::from_sys(s).name(), "UCS_ERR_UNKNOWN", "{s:?}");
        }
    }
}
