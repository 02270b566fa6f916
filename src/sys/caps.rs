//! Capability sets: bounding, permitted, effective, inheritable, ambient.
//! Raw prctl/capset so the child can drop them without allocating.

use super::{Errno, SysResult, check};

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn prctl(op: libc::c_int, a: libc::c_ulong, b: libc::c_ulong) -> SysResult<()> {
    // SAFETY: the prctl operations used here take integer arguments only.
    let ret = unsafe { libc::prctl(op, a, b, 0 as libc::c_ulong, 0 as libc::c_ulong) };
    check(ret as libc::c_long).map(|_| ())
}

/// Removes from the bounding set every capability that is in `current`
/// but not in `keep` (bit N = capability N). Needs CAP_SETPCAP, so it runs
/// before the final capset. `current` lets a caller that knows its bounding
/// set skip one prctl per capability already gone (each prctl passes the
/// LSM hooks, which are not free).
pub fn drop_bounding(current: u64, keep: u64) -> SysResult<()> {
    for cap in 0..64u32 {
        let bit = 1u64 << cap;
        if current & bit == 0 || keep & bit != 0 {
            continue;
        }
        match prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0) {
            Ok(()) | Err(Errno::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// PR_SET_KEEPCAPS, so permitted capabilities survive the setresuid that
/// switches to the command's user (only matters with --cap-add).
pub fn set_keepcaps(on: bool) -> SysResult<()> {
    prctl(libc::PR_SET_KEEPCAPS, on as libc::c_ulong, 0)
}

/// Sets effective = permitted = inheritable = `keep`, and the ambient set to
/// exactly `keep` (so a non-root command keeps them across execve).
pub fn set_process_caps(keep: u64, last_cap: u32) -> SysResult<()> {
    match prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0) {
        // A kernel without ambient capabilities (gVisor 2022-12 inside a
        // runsc sandbox) has none to clear.
        Ok(()) | Err(Errno::EINVAL) => {}
        Err(e) => return Err(e),
    }
    let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let lo = keep as u32;
    let hi = (keep >> 32) as u32;
    let data = [
        CapData { effective: lo, permitted: lo, inheritable: lo },
        CapData { effective: hi, permitted: hi, inheritable: hi },
    ];
    // SAFETY: header and a two-element data array, as capset v3 requires.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
    check(ret)?;
    for cap in 0..=last_cap {
        if keep & (1u64 << cap) != 0 {
            prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong, cap as libc::c_ulong)?;
        }
    }
    Ok(())
}

/// Reads the current (effective, permitted, inheritable) sets.
pub fn current() -> SysResult<(u64, u64, u64)> {
    let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: valid header and a two-element out array.
    let ret = unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) };
    check(ret)?;
    let join = |f: fn(&CapData) -> u32| (f(&data[0]) as u64) | ((f(&data[1]) as u64) << 32);
    Ok((join(|d| d.effective), join(|d| d.permitted), join(|d| d.inheritable)))
}

/// Bit mask of every capability this kernel knows.
pub fn all_caps(last_cap: u32) -> u64 {
    if last_cap >= 63 { u64::MAX } else { (1u64 << (last_cap + 1)) - 1 }
}

/// The runtime-spec's five sets as given (bit N = capability N): effective,
/// permitted and inheritable by capset, then the ambient set raised
/// capability by capability. The kernel refuses an ambient capability that
/// is not both permitted and inheritable; like runc, such a one is left
/// out rather than failing the container (runc's own `spec` lists ambient
/// capabilities with an empty inheritable set). The bounding set is
/// dropped separately, before.
pub fn set_all(effective: u64, permitted: u64, inheritable: u64, ambient: u64, last_cap: u32) -> SysResult<()> {
    match prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0) {
        Ok(()) | Err(Errno::EINVAL) => {}
        Err(e) => return Err(e),
    }
    let mut hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [
        CapData { effective: effective as u32, permitted: permitted as u32, inheritable: inheritable as u32 },
        CapData {
            effective: (effective >> 32) as u32,
            permitted: (permitted >> 32) as u32,
            inheritable: (inheritable >> 32) as u32,
        },
    ];
    // SAFETY: header and a two-element data array, as capset v3 requires.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
    check(ret)?;
    for cap in 0..=last_cap.min(63) {
        if ambient & permitted & inheritable & (1u64 << cap) != 0 {
            prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong, cap as libc::c_ulong)?;
        }
    }
    Ok(())
}
