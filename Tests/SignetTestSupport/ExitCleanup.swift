import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The servers a suite shares live in `static let`s, which are never deinitialised: without
/// this, their nginx (or Python) processes would outlive the test run. Each server registers its
/// process here, with the signal that stops it (SIGTERM for nginx, its fast shutdown that also
/// ends its workers; SIGKILL for Python, which inherits the runner's ignored SIGTERM), sent when
/// the test process exits.
public enum ExitCleanup {
    private static let processes = Mutex<[pid_t: Int32]>([:])
    private static let installed: Void = { atexit { ExitCleanup.stopAll() } }()

    /// Stops `pid` when the test process exits, unless ``forget(_:)`` came first.
    public static func stopAtExit(_ pid: pid_t, signal: Int32 = SIGTERM) {
        _ = installed
        processes.withLock { $0[pid] = signal }
    }

    /// The process was stopped by its owner.
    public static func forget(_ pid: pid_t) {
        processes.withLock { _ = $0.removeValue(forKey: pid) }
    }

    private static func stopAll() {
        for (pid, signal) in processes.withLock({ $0 }) { kill(pid, signal) }
    }
}
