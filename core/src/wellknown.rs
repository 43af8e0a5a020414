//! Well-known namespaces: the "social contract" proposed in the original report, as a
//! checked-in table.
//!
//! A name in this table always gets its fixed id, in every process, so two processes agree on it
//! even without a control plane. Every other name gets a dynamic id (`16..`) that only means
//! something inside one process; the peer directory translates it.
//!
//! # Claiming an entry
//! Open a pull request that adds one line to [`WELL_KNOWN`] using the lowest unclaimed id, with a
//! comment naming the project and a contact, and adds the same row to `WELL_KNOWN.md`. Ids are
//! never reassigned: a retired project's line stays, marked retired. A test checks that the table
//! is sorted by id, has no duplicate names or ids, and that `WELL_KNOWN.md` lists the same rows.

/// Id 0: the unmanaged space. Legacy tags with a zero namespace field land here; tagspace never
/// hands it out (invariant R6).
pub const UNMANAGED_ID: u16 = 0;
/// Id 1: tagspace's own control plane (handshake, announcements).
pub const CONTROL_ID: u16 = 1;
/// The Active Message id control frames travel on in `layout`: the control namespace's first
/// (a node answers on it; anything that reaches a listener can send to it).
pub const fn control_am_id(layout: &crate::TagLayout) -> u16 {
    (CONTROL_ID as u32 * layout.am_ids_per_namespace()) as u16
}

/// First id of the well-known range.
pub const FIRST_WELL_KNOWN_ID: u16 = 2;
/// First dynamic id: `FIRST_WELL_KNOWN_ID..FIRST_DYNAMIC_ID` is the well-known range.
pub const FIRST_DYNAMIC_ID: u16 = 16;

/// `(name, id)`, sorted by id. See the module docs for how to claim a line.
pub const WELL_KNOWN: &[(&str, u16)] = &[
    ("dask", 2),       // dask/distributed
    ("ucx-py", 3),     // rapidsai/ucx-py
    ("ucxx", 4),       // rapidsai/ucxx
    ("cuml", 5),       // rapidsai/cuml
    ("raft", 6),       // rapidsai/raft comms
    ("blazingsql", 7), // BlazingDB/blazingsql
    ("ucc", 8),        // openucx/ucc
    ("nccl-ucx", 9),   // NCCL's UCX network plugin
    ("spark-ucx", 10), // NVIDIA/sparkucx
    ("openmpi", 11),   // open-mpi pml/ucx
    ("mpich", 12),     // pmodels/mpich ch4/ucx
    ("legate", 13),    // nv-legate
];

/// The fixed id of a well-known name.
pub const fn well_known_id(name: &[u8]) -> Option<u16> {
    let mut i = 0;
    while i < WELL_KNOWN.len() {
        let (n, id) = WELL_KNOWN[i];
        let n = n.as_bytes();
        if n.len() == name.len() {
            let mut j = 0;
            while j < n.len() && n[j] == name[j] {
                j += 1;
            }
            if j == n.len() {
                return Some(id);
            }
        }
        i += 1;
    }
    None
}

/// The name that owns a well-known id.
pub const fn well_known_name(id: u16) -> Option<&'static str> {
    let mut i = 0;
    while i < WELL_KNOWN.len() {
        if WELL_KNOWN[i].1 == id {
            return Some(WELL_KNOWN[i].0);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Name;

    #[test]
    fn table_is_well_formed() {
        let mut prev = FIRST_WELL_KNOWN_ID - 1;
        for &(name, id) in WELL_KNOWN {
            assert!(id > prev, "{name}: ids must be sorted and unique");
            assert!((FIRST_WELL_KNOWN_ID..FIRST_DYNAMIC_ID).contains(&id));
            assert!(Name::new(name).is_ok(), "{name}");
            assert_eq!(well_known_id(name.as_bytes()), Some(id));
            assert_eq!(well_known_name(id), Some(name));
            prev = id;
        }
        assert_eq!(well_known_id(b"not-a-library"), None);
        assert_eq!(well_known_id(b"das"), None);
    }

    #[test]
    fn markdown_table_agrees() {
        // The human-readable contract must list exactly the same rows as the code.
        let md = include_str!("../WELL_KNOWN.md");
        let rows: std::vec::Vec<(std::string::String, u16)> = md
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| id") && !l.starts_with("|--"))
            .map(|l| {
                let cols: std::vec::Vec<&str> = l.split('|').map(str::trim).collect();
                (cols[2].trim_matches('`').into(), cols[1].parse().unwrap())
            })
            .filter(|(_, id)| *id >= FIRST_WELL_KNOWN_ID)
            .collect();
        let code: std::vec::Vec<(std::string::String, u16)> =
            WELL_KNOWN.iter().map(|&(n, i)| (n.into(), i)).collect();
        assert_eq!(rows, code);
    }
    extern crate std;
}
