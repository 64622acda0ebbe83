/// What to do when the process is interrupted while Signet is writing.
///
/// Every temporary file and staging directory Signet makes is named after what it is for and
/// the process that made it (`.TARGET.signet-PID-TAG-RANDOM`, beside TARGET) and registered
/// here while it exists. A program that handles SIGINT/SIGTERM itself (the `signet` CLI does, on
/// a thread of its own) calls ``removeTemporaryFiles()`` before it exits. After a `kill -9`, the
/// next pack or unpack to the same target removes what a process that no longer runs left.
public enum Interruption {
    /// Removes every temporary file and staging directory in progress. For a signal-handling
    /// thread about to exit the process; Signet's work in progress is not usable afterwards.
    public static func removeTemporaryFiles() {
        // A ranged update first writes what arrived into its staging, which stays for the next
        // run (at most a few seconds; FORMAT §5).
        TemporaryFiles.drain(timeout: 5)
        HookRunner.endRunning()
        TemporaryFiles.removeAllForExit()
    }
}
