//! Device rules on cgroup v2: the device controller of v2 is an eBPF
//! program (BPF_PROG_TYPE_CGROUP_DEVICE) attached to the cgroup, asked at
//! every open, mknod and access of a device node with the node's type,
//! major, minor and the access wanted; it answers allow (1) or deny (0).
//! v1 has devices.allow / devices.deny files instead (OCI mode writes
//! them). The program is built here from the rule list, as runc's
//! devicefilter does:
//!
//! - the rules are read last first and the first that matches decides (a
//!   later rule overrides an earlier one, as with v1's files);
//! - nothing matched: deny (an OCI device list starts from deny-all);
//! - an allow rule matches when every access asked is among its accesses
//!   (`rw` of a `rwm` rule); a deny rule matches when any access asked is
//!   among its accesses (a `w` deny refuses an `rw` open). That is stricter
//!   than runc for partial deny rules, which engines do not send (Docker's
//!   and containerd's lists are a deny-all and allows): fail closed.

use crate::sys::bpf::{Insn, attach_cgroup_device, load_cgroup_device};
use std::os::fd::AsFd;
use std::path::Path;

/// One device rule (OCI's `linux.resources.devices[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub allow: bool,
    /// 'a' (any), 'b' or 'c'.
    pub kind: char,
    /// None: any.
    pub major: Option<u32>,
    pub minor: Option<u32>,
    /// Any of 'r', 'w', 'm'.
    pub access: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device rule {index}: type {kind:?} (one of a, b, c)")]
    Kind { index: usize, kind: char },
    #[error("device rule {index}: access {access:?} (letters r, w, m)")]
    Access { index: usize, access: String },
    #[error("opening cgroup {path} for its device program: {err}")]
    Open { path: String, err: std::io::Error },
    #[error("loading the cgroup device program: {errno}{}", if .log.is_empty() { String::new() } else { format!(" (verifier: {})", .log) })]
    Load { errno: nix::errno::Errno, log: String },
    #[error("attaching the device program to cgroup {path}: {errno}")]
    Attach { path: String, errno: nix::errno::Errno },
}

impl DeviceError {
    pub fn errno(&self) -> Option<nix::errno::Errno> {
        match self {
            DeviceError::Load { errno, .. } | DeviceError::Attach { errno, .. } => Some(*errno),
            DeviceError::Open { err, .. } => err.raw_os_error().map(nix::errno::Errno::from_raw),
            _ => None,
        }
    }
}

// The kernel's `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major;
// u32 minor; }`: access_type is (access << 16) | type.
const DEV_BLOCK: i32 = 1;
const DEV_CHAR: i32 = 2;
const ACC_MKNOD: i32 = 1;
const ACC_READ: i32 = 2;
const ACC_WRITE: i32 = 4;

// eBPF opcodes used (linux/bpf_common.h, linux/bpf.h).
const LDX_W_MEM: u8 = 0x61;
const ALU32_AND_K: u8 = 0x54;
const ALU32_RSH_K: u8 = 0x74;
const ALU32_MOV_X: u8 = 0xbc;
const ALU64_MOV_K: u8 = 0xb7;
const JMP_JNE_K: u8 = 0x55;
const JMP_JEQ_K: u8 = 0x15;
const EXIT: u8 = 0x95;

fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | (dst & 0x0f), off, imm }
}

fn access_bits(index: usize, access: &str) -> Result<i32, DeviceError> {
    let mut bits = 0;
    for c in access.chars() {
        bits |= match c {
            'm' => ACC_MKNOD,
            'r' => ACC_READ,
            'w' => ACC_WRITE,
            _ => return Err(DeviceError::Access { index, access: access.into() }),
        };
    }
    Ok(bits)
}

/// The program for `rules` (see the module's comment for its meaning).
pub fn program(rules: &[Rule]) -> Result<Vec<Insn>, DeviceError> {
    // r2 = type, r3 = access asked, r4 = major, r5 = minor.
    let mut p = vec![
        ins(LDX_W_MEM, 2, 1, 0, 0),
        ins(ALU32_AND_K, 2, 0, 0, 0xffff),
        ins(LDX_W_MEM, 3, 1, 0, 0),
        ins(ALU32_RSH_K, 3, 0, 0, 16),
        ins(LDX_W_MEM, 4, 1, 4, 0),
        ins(LDX_W_MEM, 5, 1, 8, 0),
    ];
    for (index, r) in rules.iter().enumerate().rev() {
        let bits = access_bits(index, &r.access)?;
        let all = ACC_MKNOD | ACC_READ | ACC_WRITE;
        // Each check jumps to the end of this rule's block when it fails;
        // the offsets are filled in once the block's length is known.
        let mut block: Vec<Insn> = Vec::new();
        let mut jumps: Vec<usize> = Vec::new();
        match r.kind {
            'a' => {}
            'b' | 'c' => {
                jumps.push(block.len());
                block.push(ins(JMP_JNE_K, 2, 0, 0, if r.kind == 'b' { DEV_BLOCK } else { DEV_CHAR }));
            }
            kind => return Err(DeviceError::Kind { index, kind }),
        }
        if bits & all != all || !r.allow {
            // r1 = r3 & (allow: the accesses NOT granted; deny: the ones
            // denied); allow matches when that is 0, deny when it is not.
            block.push(ins(ALU32_MOV_X, 1, 3, 0, 0));
            let mask = if r.allow { !bits & all } else { bits };
            block.push(ins(ALU32_AND_K, 1, 0, 0, mask));
            jumps.push(block.len());
            block.push(ins(if r.allow { JMP_JNE_K } else { JMP_JEQ_K }, 1, 0, 0, 0));
        }
        if let Some(m) = r.major {
            jumps.push(block.len());
            block.push(ins(JMP_JNE_K, 4, 0, 0, m as i32));
        }
        if let Some(m) = r.minor {
            jumps.push(block.len());
            block.push(ins(JMP_JNE_K, 5, 0, 0, m as i32));
        }
        block.push(ins(ALU64_MOV_K, 0, 0, 0, r.allow as i32));
        block.push(ins(EXIT, 0, 0, 0, 0));
        let len = block.len();
        for j in jumps {
            // To the first instruction after this block.
            block[j].off = (len - j - 1) as i16;
        }
        p.extend(block);
    }
    p.push(ins(ALU64_MOV_K, 0, 0, 0, 0));
    p.push(ins(EXIT, 0, 0, 0, 0));
    Ok(p)
}

/// Loads the program for `rules` and attaches it to the cgroup `dir`.
pub fn apply(dir: &Path, rules: &[Rule]) -> Result<(), DeviceError> {
    let insns = program(rules)?;
    let path = dir.display().to_string();
    let cg = std::fs::File::open(dir).map_err(|err| DeviceError::Open { path: path.clone(), err })?;
    let mut log = vec![0u8; 16 << 10];
    let prog = load_cgroup_device(&insns, b"husk_devices", &mut log).map_err(|errno| {
        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
        DeviceError::Load { errno, log: String::from_utf8_lossy(&log[..end]).trim().to_string() }
    })?;
    attach_cgroup_device(cg.as_fd(), prog.as_fd()).map_err(|errno| DeviceError::Attach { path, errno })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one request, as the kernel would (the few
    /// opcodes `program` emits).
    fn eval(p: &[Insn], kind: i32, access: i32, major: u32, minor: u32) -> u64 {
        let mut r = [0u64; 11];
        let ctx = [((access as u32) << 16) | kind as u32, major, minor];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0x0f) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                LDX_W_MEM => r[dst] = ctx[i.off as usize / 4] as u64,
                ALU32_AND_K => r[dst] = (r[dst] as u32 & i.imm as u32) as u64,
                ALU32_RSH_K => r[dst] = ((r[dst] as u32) >> i.imm) as u64,
                ALU32_MOV_X => r[dst] = r[src] as u32 as u64,
                ALU64_MOV_K => r[dst] = i.imm as i64 as u64,
                JMP_JNE_K if r[dst] != i.imm as i64 as u64 => pc += i.off as usize,
                JMP_JEQ_K if r[dst] == i.imm as i64 as u64 => pc += i.off as usize,
                JMP_JNE_K | JMP_JEQ_K => {}
                EXIT => return r[0],
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn rule(allow: bool, kind: char, major: Option<u32>, minor: Option<u32>, access: &str) -> Rule {
        Rule { allow, kind, major, minor, access: access.into() }
    }

    /// Docker's default list (moby's DefaultLinuxSpec): deny all, mknod of
    /// any node, the usual character devices, ptys.
    fn docker() -> Vec<Rule> {
        let mut v = vec![rule(false, 'a', None, None, "rwm")];
        v.push(rule(true, 'c', None, None, "m"));
        v.push(rule(true, 'b', None, None, "m"));
        for (ma, mi) in [(1, 3), (1, 5), (1, 7), (5, 0), (5, 1), (5, 2), (1, 8), (1, 9), (10, 200)] {
            v.push(rule(true, 'c', Some(ma), Some(mi), "rwm"));
        }
        v.push(rule(true, 'c', Some(136), None, "rwm"));
        v
    }

    #[test]
    fn dockers_list_allows_null_and_ptys_and_denies_the_rest() {
        let p = program(&docker()).unwrap();
        let rw = ACC_READ | ACC_WRITE;
        assert_eq!(eval(&p, DEV_CHAR, rw, 1, 3), 1, "/dev/null");
        assert_eq!(eval(&p, DEV_CHAR, rw, 136, 4), 1, "a pty");
        assert_eq!(eval(&p, DEV_CHAR, ACC_MKNOD, 1, 11), 1, "mknod of any char node");
        assert_eq!(eval(&p, DEV_CHAR, ACC_WRITE, 1, 11), 0, "/dev/kmsg");
        assert_eq!(eval(&p, DEV_CHAR, ACC_READ, 1, 1), 0, "/dev/mem");
        assert_eq!(eval(&p, DEV_BLOCK, ACC_READ, 8, 0), 0, "a disk");
        assert_eq!(eval(&p, DEV_BLOCK, ACC_MKNOD, 8, 0), 1, "mknod of a block node");
    }

    #[test]
    fn a_later_rule_overrides_an_earlier_one_and_partial_denies_fail_closed() {
        let rules = vec![rule(true, 'a', None, None, "rwm"), rule(false, 'c', Some(1), Some(3), "w")];
        let p = program(&rules).unwrap();
        assert_eq!(eval(&p, DEV_CHAR, ACC_READ, 1, 3), 1);
        assert_eq!(eval(&p, DEV_CHAR, ACC_WRITE, 1, 3), 0);
        assert_eq!(eval(&p, DEV_CHAR, ACC_READ | ACC_WRITE, 1, 3), 0, "an rw open is refused by a w deny");
        assert_eq!(eval(&p, DEV_CHAR, ACC_WRITE, 1, 5), 1);
        // Allow of r only: an rw open is not allowed by it.
        let p = program(&[rule(true, 'c', Some(1), Some(9), "r")]).unwrap();
        assert_eq!(eval(&p, DEV_CHAR, ACC_READ, 1, 9), 1);
        assert_eq!(eval(&p, DEV_CHAR, ACC_READ | ACC_WRITE, 1, 9), 0);
        // Nothing matched: deny.
        assert_eq!(eval(&program(&[]).unwrap(), DEV_CHAR, ACC_READ, 1, 3), 0);
    }

    /// The real thing: the kernel runs the program for a process in the
    /// cgroup (any v2 hierarchy: a hybrid host's /sys/fs/cgroup/unified
    /// has no controllers, and device programs need none).
    #[test]
    fn kernel_enforces_the_program_on_a_v2_cgroup() {
        assert!(nix::unistd::geteuid().is_root(), "SKIP: needs root (bpf, a cgroup of its own)");
        let v2 = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.subtree_control").exists())
            .expect("a cgroup v2 hierarchy");
        let dir = v2.join(format!("husk-devtest-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let applied = apply(&dir, &[rule(true, 'c', Some(1), Some(3), "rwm")]);
        let out = applied.as_ref().ok().map(|_| {
            let script = format!(
                "echo $$ > {}/cgroup.procs && echo x > /dev/null && echo NULL_OK; \
                 head -c 1 /dev/zero > /dev/null 2>&1 && echo ZERO_OK || echo ZERO_DENIED",
                dir.display()
            );
            std::process::Command::new("/bin/sh").args(["-c", &script]).output().unwrap()
        });
        let _ = std::fs::remove_dir(&dir);
        let out = out.unwrap_or_else(|| panic!("{:?}", applied.err()));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "NULL_OK\nZERO_DENIED\n");
    }

    #[test]
    fn bad_kind_or_access_is_refused_with_the_rule() {
        assert!(matches!(program(&[rule(true, 'x', None, None, "r")]), Err(DeviceError::Kind { index: 0, .. })));
        assert!(matches!(program(&[rule(true, 'c', None, None, "rx")]), Err(DeviceError::Access { index: 0, .. })));
    }
}
