import Foundation
internal import COpenSSL
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One thread of Signet's own that runs blocks in the order they are given: what a serial
/// `DispatchQueue` did for the second core, without libdispatch's worker threads. Those set
/// their priority from a QoS class as they start, which a systemd unit without `CAP_SYS_NICE`
/// refuses, and libdispatch then writes "Failed to set thread priority for worker thread" to
/// the journal on every run.
///
/// The thread starts with the first block and ends with ``stop()``, which its owner calls in
/// `deinit` (blocks already given still run first).
package final class SerialWorker: @unchecked Sendable {
    private let condition = NSCondition()
    private var blocks: [() -> Void] = []
    private var running = false
    private var started = false
    private var stopping = false
    private var finished = false
    /// The worker's own thread, once it runs: `stop()` from a block (the owner's `deinit` when
    /// a block held the last reference) does not wait for itself.
    private var thread: pthread_t?

    package init() {}

    /// Runs `block` on the worker's thread after every block given before it.
    package func async(_ block: @escaping () -> Void) {
        condition.lock()
        blocks.append(block)
        if !started {
            started = true
            let thread = Thread { [self] in loop() }
            thread.stackSize = OwnThreads.stackSize
            thread.start()
        }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until every block given so far has run.
    package func drain() {
        condition.lock()
        while !blocks.isEmpty || running { condition.wait() }
        condition.unlock()
    }

    /// Ends the thread once the blocks given have run, and waits for it (its OpenSSL state is
    /// freed before this returns, so a process that exits next leaves nothing behind).
    package func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        let onWorker = thread.map { pthread_equal($0, pthread_self()) != 0 } ?? false
        while started && !finished && !onWorker { condition.wait() }
        condition.unlock()
    }

    private func loop() {
        condition.lock()
        thread = pthread_self()
        while true {
            while blocks.isEmpty && !stopping { condition.wait() }
            if blocks.isEmpty { break }
            let block = blocks.removeFirst()
            running = true
            condition.unlock()
            block()
            condition.lock()
            running = false
            condition.broadcast()
        }
        condition.unlock()
        OPENSSL_thread_stop()
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }
}
