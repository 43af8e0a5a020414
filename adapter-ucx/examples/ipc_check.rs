//! Two-process check of the CUDA IPC cache on a real GPU (`scripts/gpu-ipc-check.sh`).
//!
//! The parent spawns an exporter process that allocates device memory, fills it with a pattern
//! and prints an `IpcDescriptor` (hex) for a sub-range of it. The parent then imports that
//! descriptor twice through one cache, as two libraries would, and checks: the driver was asked
//! to open the handle once; both imports see the same device pointer; the bytes read back
//! through the mapping are the exporter's; the last release closes the mapping once.
//!
//! Exit status: 0 pass, 1 fail, 2 not run (no CUDA driver or no device on this machine).

use cudarc::driver::sys;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use tagspace_core::ipc::IpcDescriptor;
use tagspace_ucx::ipc::{exporter_id, CudaDriverBackend, IpcBackend, IpcCache, IpcError};

const ALLOC: usize = 1 << 20;
const OFFSET: u64 = 4096;
const LEN: u64 = 64 * 1024;

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 8)) as u8
}

fn cu(call: &str, r: sys::CUresult) {
    if r != sys::CUresult::CUDA_SUCCESS {
        eprintln!("{call} failed: {r:?}");
        std::process::exit(1);
    }
}

/// Counts driver calls, to prove the handle was opened once.
struct Counting {
    real: CudaDriverBackend,
    opens: AtomicU64,
    closes: AtomicU64,
}

impl IpcBackend for Counting {
    fn open(&self, device: u32, handle: &[u8; 64]) -> Result<u64, IpcError> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        self.real.open(device, handle)
    }
    fn close(&self, device: u32, base: u64) -> Result<(), IpcError> {
        self.closes.fetch_add(1, Ordering::SeqCst);
        self.real.close(device, base)
    }
}

fn exporter(backend: CudaDriverBackend) {
    if let Err(e) = backend.make_current(0) {
        eprintln!("exporter: {e}");
        std::process::exit(2);
    }
    let host: Vec<u8> = (0..ALLOC).map(pattern).collect();
    let mut dptr: sys::CUdeviceptr = 0;
    let mut handle = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: the driver is loaded (backend constructed) and a context is current; every pointer
    // is a valid out-pointer or a host buffer of ALLOC bytes.
    unsafe {
        cu("cuMemAlloc", sys::cuMemAlloc_v2(&mut dptr, ALLOC));
        cu(
            "cuMemcpyHtoD",
            sys::cuMemcpyHtoD_v2(dptr, host.as_ptr().cast(), ALLOC),
        );
        cu(
            "cuIpcGetMemHandle",
            sys::cuIpcGetMemHandle(&mut handle, dptr),
        );
    }
    let d = IpcDescriptor {
        exporter: exporter_id().expect("exporter identity"),
        device: 0,
        handle: handle.reserved.map(|c| c as u8),
        offset: OFFSET,
        len: LEN,
    };
    let hex: String = d.encode().iter().map(|b| format!("{b:02x}")).collect();
    println!("{hex}");
    std::io::stdout().flush().unwrap();
    // Keep the allocation alive until the importer is done.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    // SAFETY: `dptr` came from cuMemAlloc above and is freed once.
    unsafe { cu("cuMemFree", sys::cuMemFree_v2(dptr)) };
}

fn main() {
    let backend = match CudaDriverBackend::new() {
        Ok(b) => b,
        Err(e) => {
            println!("NOT RUN: {e}");
            std::process::exit(2);
        }
    };
    if std::env::args().nth(1).as_deref() == Some("export") {
        return exporter(backend);
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("export")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn exporter");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut hex = String::new();
    out.read_line(&mut hex).expect("descriptor line");
    let hex = hex.trim();
    if hex.len() != IpcDescriptor::LEN * 2 {
        println!("FAIL: exporter did not produce a descriptor ({hex:?})");
        std::process::exit(1);
    }
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let desc = IpcDescriptor::decode(&bytes).expect("descriptor decodes");
    println!(
        "importer pid {}, exporter pid {}, device {}",
        std::process::id(),
        desc.exporter.pid,
        desc.device
    );
    let cache = IpcCache::new(Counting {
        real: backend,
        opens: AtomicU64::new(0),
        closes: AtomicU64::new(0),
    });
    let lib_a = cache.import(&desc).expect("first import");
    let lib_b = cache
        .import(&desc)
        .expect("second import (a second library)");
    let mut ok = true;
    let opens = cache.backend().opens.load(Ordering::SeqCst);
    println!("driver opens after two imports: {opens}");
    ok &= opens == 1;
    ok &= lib_a.device_ptr() == lib_b.device_ptr();
    cache.backend().real.make_current(0).unwrap();
    let mut back = vec![0u8; LEN as usize];
    // SAFETY: the mapping is open (guards alive) and covers OFFSET..OFFSET+LEN of the exporter's
    // allocation; `back` holds LEN bytes.
    unsafe {
        cu(
            "cuMemcpyDtoH",
            sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), lib_b.device_ptr(), LEN as usize),
        );
    }
    let want: Vec<u8> = (OFFSET as usize..(OFFSET + LEN) as usize)
        .map(pattern)
        .collect();
    let bytes_ok = back == want;
    println!("bytes match the exporter's: {bytes_ok}");
    ok &= bytes_ok;
    drop(lib_a);
    ok &= cache.backend().closes.load(Ordering::SeqCst) == 0;
    drop(lib_b);
    let closes = cache.backend().closes.load(Ordering::SeqCst);
    println!("driver closes after both releases: {closes}");
    ok &= closes == 1;
    let _ = writeln!(child.stdin.take().unwrap(), "done");
    let status = child.wait().expect("exporter exit");
    ok &= status.success();
    println!("{}", if ok { "PASS" } else { "FAIL" });
    std::process::exit(if ok { 0 } else { 1 });
}
