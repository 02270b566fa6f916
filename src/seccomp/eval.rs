//! A classic-BPF interpreter over `struct seccomp_data`, with the kernel's
//! semantics for the instructions seccomp accepts. Two users: explain mode's
//! supervisor (which errno does the enforcing program give the syscall a
//! notification is about) and tests, which check compiled programs as values.

use super::compile::{AUDIT_ARCH_X86_64, RET_KILL_PROCESS, SockFilter};

/// `struct seccomp_data`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Data {
    pub nr: i32,
    pub arch: u32,
    pub ip: u64,
    pub args: [u64; 6],
}

impl Data {
    /// A native x86_64 syscall with these arguments.
    pub fn syscall(nr: i32, args: &[u64]) -> Data {
        let mut a = [0u64; 6];
        a[..args.len().min(6)].copy_from_slice(&args[..args.len().min(6)]);
        Data { nr, arch: AUDIT_ARCH_X86_64, ip: 0, args: a }
    }

    fn bytes(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&self.nr.to_ne_bytes());
        b[4..8].copy_from_slice(&self.arch.to_ne_bytes());
        b[8..16].copy_from_slice(&self.ip.to_ne_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        b
    }
}

/// Runs `program` on `data` and returns the filter's return value. Anything
/// the kernel would have rejected at load time (bad opcode, out-of-range
/// load, falling off the end) yields KILL_PROCESS: never an accidental allow.
pub fn run(program: &[SockFilter], data: &Data) -> u32 {
    let d = data.bytes();
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; 16];
    let mut pc = 0usize;
    while let Some(i) = program.get(pc) {
        pc += 1;
        let k = i.k;
        let class = i.code & 0x07;
        match class {
            // LD / LDX
            0x00 | 0x01 => {
                let v = match i.code & 0xe0 {
                    0x00 => k, // IMM
                    0x20 if class == 0x00 && i.code & 0x18 == 0 => {
                        // ABS, word size only
                        let o = k as usize;
                        if !o.is_multiple_of(4) || o + 4 > d.len() {
                            return RET_KILL_PROCESS;
                        }
                        u32::from_ne_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]])
                    }
                    0x60 if k < 16 => mem[k as usize], // MEM
                    0x80 => d.len() as u32,            // LEN
                    _ => return RET_KILL_PROCESS,
                };
                if class == 0x00 { a = v } else { x = v }
            }
            0x02 if k < 16 => mem[k as usize] = a,
            0x03 if k < 16 => mem[k as usize] = x,
            // ALU
            0x04 => {
                let src = if i.code & 0x08 != 0 { x } else { k };
                a = match i.code & 0xf0 {
                    0x00 => a.wrapping_add(src),
                    0x10 => a.wrapping_sub(src),
                    0x20 => a.wrapping_mul(src),
                    0x30 if src != 0 => a / src,
                    0x40 => a | src,
                    0x50 => a & src,
                    0x60 => a.checked_shl(src).unwrap_or(0),
                    0x70 => a.checked_shr(src).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 if src != 0 => a % src,
                    0xa0 => a ^ src,
                    _ => return RET_KILL_PROCESS,
                };
            }
            // JMP
            0x05 => {
                let src = if i.code & 0x08 != 0 { x } else { k };
                let taken = match i.code & 0xf0 {
                    0x00 => {
                        pc += k as usize;
                        continue;
                    }
                    0x10 => a == src,
                    0x20 => a > src,
                    0x30 => a >= src,
                    0x40 => a & src != 0,
                    _ => return RET_KILL_PROCESS,
                };
                pc += if taken { i.jt as usize } else { i.jf as usize };
            }
            // RET
            0x06 => {
                return match i.code & 0x18 {
                    0x00 => k,
                    0x10 => a,
                    _ => RET_KILL_PROCESS,
                };
            }
            // MISC: TAX / TXA
            0x07 => match i.code & 0xf8 {
                0x00 => x = a,
                0x80 => a = x,
                _ => return RET_KILL_PROCESS,
            },
            _ => return RET_KILL_PROCESS,
        }
    }
    RET_KILL_PROCESS
}
