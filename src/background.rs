//! Work started now on another cpu and collected later, side by side with
//! other work instead of after it (the sandbox's network namespace).
//!
//! A new thread is queued on its creator's cpu and would only run once the
//! creator blocks (measured: the sandbox's netns thread started 1.3 ms
//! after it was spawned, exactly when the init waited for it), so the
//! thread is pinned to another cpu the process may use. With a single cpu,
//! or when no thread can be made, the work runs in `join` instead.

/// A value being computed on another thread.
pub struct Background<T> {
    work: fn() -> T,
    thread: Option<std::thread::JoinHandle<T>>,
}

impl<T: Send + 'static> Background<T> {
    pub fn start(name: &str, work: fn() -> T) -> Background<T> {
        let thread = std::thread::Builder::new().name(name.into()).stack_size(256 << 10).spawn(work).ok();
        if let Some(t) = &thread {
            crate::sys::process::pin_to_other_cpu(std::os::unix::thread::JoinHandleExt::as_pthread_t(t));
        }
        Background { work, thread }
    }

    /// The value; waits for the thread (so none is left running: callers
    /// fork afterwards). Computed here if the thread could not be made or
    /// panicked.
    pub fn join(self) -> T {
        match self.thread.map(std::thread::JoinHandle::join) {
            Some(Ok(v)) => v,
            _ => (self.work)(),
        }
    }
}
