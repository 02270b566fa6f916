//! Live progress of the layers an import or pull builds, for a terminal:
//! one bar per layer, redrawn in place (cursor up N lines, clear, rewrite)
//! a few times a second, and left on screen in its final state. Only drawn
//! when stderr is a TTY (the caller checks); pipes and logs get one line
//! per layer event instead, and `--json` gets events.

use std::io::Write;

/// A layer's state as the bars show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not started (waiting for a worker, or for another process that
    /// holds the layer's lock).
    Waiting,
    /// Being read (downloaded or read from the archive) and unpacked.
    Running,
    Done,
    Failed,
}

/// One bar per layer.
pub struct Bars {
    /// Short digest and blob size of each layer.
    layers: Vec<(String, u64)>,
    /// What a running layer is doing ("pulling", "unpacking").
    running: &'static str,
    drawn: bool,
}

const WIDTH: usize = 30;

impl Bars {
    pub fn new(layers: Vec<(String, u64)>, running: &'static str) -> Bars {
        Bars { layers, running, drawn: false }
    }

    /// The line of layer `i` having read `read` bytes.
    pub fn line(&self, i: usize, read: u64, state: State) -> String {
        let (label, size) = &self.layers[i];
        let size = (*size).max(1);
        let read = if state == State::Done { size } else { read.min(size) };
        let filled = (read as f64 / size as f64 * WIDTH as f64) as usize;
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let what = match state {
            State::Waiting => "waiting",
            State::Running => self.running,
            State::Done => "done",
            State::Failed => "failed",
        };
        format!(
            "  {label:<12} [{}{}] {:>7.1}/{:.1} MiB  {what}",
            "#".repeat(filled),
            ".".repeat(WIDTH - filled),
            mib(read),
            mib(size)
        )
    }

    /// Redraws every bar: `read[i]` bytes of layer i, in `state[i]`.
    pub fn draw(&mut self, read: &[u64], state: &[State]) {
        let n = self.layers.len();
        let mut out = String::new();
        if self.drawn && n > 0 {
            out.push_str(&format!("\x1b[{n}A"));
        }
        for i in 0..n {
            out.push_str("\r\x1b[2K");
            out.push_str(&self.line(
                i,
                read.get(i).copied().unwrap_or(0),
                state.get(i).copied().unwrap_or(State::Waiting),
            ));
            out.push('\n');
        }
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(out.as_bytes());
        let _ = err.flush();
        self.drawn = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_fills_with_the_bytes_read_and_says_the_state() {
        let b = Bars::new(vec![("0123456789ab".into(), 2 << 20), ("cdef01234567".into(), 0)], "pulling");
        let half = b.line(0, 1 << 20, State::Running);
        assert!(half.contains(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))), "{half}");
        assert!(half.contains("1.0/2.0 MiB") && half.ends_with("pulling"), "{half}");
        assert!(b.line(0, 0, State::Done).contains(&"#".repeat(WIDTH)));
        assert!(b.line(1, 0, State::Waiting).ends_with("waiting"));
        assert!(b.line(0, 5 << 20, State::Failed).contains("2.0/2.0"), "never past the size");
    }
}
