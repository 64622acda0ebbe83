import Foundation
import Signet
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// SIGINT, SIGTERM and SIGHUP, handled on a thread of their own: the signals are blocked in every
/// thread (threads inherit the mask, so this runs before any other thread starts) and one thread
/// waits for them with `sigwait`. It can then do what a signal handler may not: put the
/// terminal back if a prompt had switched echo off, remove every temporary file and staging
/// directory in progress, and end the process as the signal would have (so shells see 130/143).
enum Signals {
    static let handled: [Int32] = [SIGINT, SIGTERM, SIGHUP]

    /// What an interruption leaves, said on stderr when one comes (an exit
    /// 130 with nothing said leaves the user guessing). Each command that writes sets its own.
    static let state = Mutex("temporary files are removed; nothing else was changed")

    /// Sets what an interruption of the running command leaves.
    static func onInterrupt(_ text: String) { state.withLock { $0 = text } }

    /// Work a command needs done before it ends of a signal (`serve`: stop the command it runs,
    /// remove the socket it made), run on the signal's thread before the temporary files go.
    static let beforeExit = Mutex<(@Sendable () -> Void)?>(nil)

    static func install() {
        var set = sigset_t()
        sigemptyset(&set)
        for number in handled {
            // A signal the parent set to be ignored (nohup, a background job) stays ignored.
            var current = sigaction()
            if sigaction(number, nil, &current) == 0, unsafeBitCast(current.__sigaction_handler.sa_handler, to: Int.self) == 1 { continue }
            sigaddset(&set, number)
        }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        let mask = set
        let waiter = Thread {
            var received: Int32 = 0
            var waitSet = mask
            while sigwait(&waitSet, &received) != 0 {}
            Terminal.restoreAfterInterrupt()
            Signals.beforeExit.withLock { $0 }?()
            Interruption.removeTemporaryFiles()
            let name = received == SIGINT ? "SIGINT" : received == SIGTERM ? "SIGTERM" : received == SIGHUP ? "SIGHUP" : "signal \(received)"
            Output.standardError("signet: interrupted (\(name)); \(Output.escaped(Signals.state.withLock { $0 }))\n")
            // Die of the signal itself.
            signal(received, SIG_DFL)
            var only = sigset_t()
            sigemptyset(&only)
            sigaddset(&only, received)
            pthread_sigmask(SIG_UNBLOCK, &only, nil)
            kill(getpid(), received)
            _exit(128 + received)
        }
        waiter.start()
    }
}
