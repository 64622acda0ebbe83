import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import COpenSSL

/// Threads Signet starts for blocking work, joined before returning.
package enum OwnThreads {
    /// Stack of each thread: deep enough for any of Signet's work.
    static let stackSize = 4 << 20

    /// Runs `work` on `count` threads at once (the calling thread is one of them) and returns
    /// when all have finished.
    package static func run(count: Int, _ work: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        for _ in 1..<max(1, count) {
            let thread = Thread {
                work()
                releaseThreadState()
                done.signal()
            }
            thread.stackSize = stackSize
            thread.start()
        }
        work()
        for _ in 1..<max(1, count) { done.wait() }
    }

    /// Frees OpenSSL's per-thread state (its random generators, the error queue) before the
    /// thread reports that it is done. OpenSSL would free it as the thread exits, but the
    /// process may already be exiting then (the CLI returns as soon as the work is done), and
    /// LeakSanitizer reports the random generators of a thread that is still on its way out.
    private static func releaseThreadState() {
        OPENSSL_thread_stop()
    }

    /// Starts blocking `work` on a thread of its own now; ``Started/wait()`` joins it. The
    /// caller must wait before anything `work` uses goes away (a descriptor, say), also when
    /// it leaves early by throwing: `defer { _ = started.wait() }`.
    package static func start<R: Sendable>(_ work: @escaping @Sendable () throws -> R) -> Started<R> {
        let started = Started<R>()
        let thread = Thread {
            let result = Result { try work() }
            releaseThreadState()
            started.finish(result)
        }
        thread.stackSize = stackSize
        thread.start()
        return started
    }

    /// Work started by ``start(_:)``.
    package final class Started<R: Sendable>: Sendable {
        private let result = Mutex<Result<R, any Error>?>(nil)
        private let done = DispatchSemaphore(value: 0)

        fileprivate func finish(_ value: Result<R, any Error>) {
            result.withLock { $0 = value }
            done.signal()
        }

        /// Waits for the work to end (once or many times) and gives its result.
        package func wait() -> Result<R, any Error> {
            if let finished = result.withLock({ $0 }) { return finished }
            done.wait()
            return result.withLock { $0! }
        }
    }

    /// Runs blocking `work` on a thread of its own and resumes the caller with its result.
    package static func async<R: Sendable>(_ work: @escaping @Sendable () -> R) async -> R {
        await withCheckedContinuation { continuation in
            let thread = Thread {
                let result = work()
                releaseThreadState()
                continuation.resume(returning: result)
            }
            thread.stackSize = stackSize
            thread.start()
        }
    }

    /// The same for work that throws.
    package static func async<R: Sendable>(_ work: @escaping @Sendable () throws -> R) async throws -> R {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                let result = Result { try work() }
                releaseThreadState()
                continuation.resume(with: result)
            }
            thread.stackSize = stackSize
            thread.start()
        }
    }
}
