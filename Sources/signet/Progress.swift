import Dispatch
import Foundation
import Signet
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The updating line on a terminal that shows how a long operation is going: items and bytes
/// done, rate and time left, on stderr, at most ten times a second. Shown only when stderr is a
/// terminal and neither `--json` nor `--quiet` was given.
final class ProgressLine: Sendable {
    private struct State {
        var start: UInt64 = DispatchTime.now().uptimeNanoseconds
        var last: UInt64 = 0
        var shown = false
        var baseline: UInt64? = nil
        /// What is being done now, when it changed since the line started (``relabel(_:)``).
        var label: String? = nil
    }

    private let label: String
    let enabled: Bool
    private let state = Mutex(State())

    /// `label` is escaped (it may be a URL or a file name).
    init(_ label: String, output: OutputOptions) {
        self.label = Output.escaped(label)
        enabled = isatty(STDERR_FILENO) == 1 && !output.json && !output.quiet
    }

    /// Shows `done` of `total` bytes (total nil when unknown); `kept` bytes were there before
    /// this run started and do not count towards the rate.
    func update(bytes done: UInt64, of total: UInt64?, kept: UInt64 = 0, force: Bool = false) {
        Events.current?.progress(bytesDone: done, bytesTotal: total, finished: force)
        guard enabled else { return }
        let text: String? = state.withLock { state in
            let now = DispatchTime.now().uptimeNanoseconds
            guard force || now &- state.last >= 100_000_000 else { return nil }
            state.last = now
            state.shown = true
            let baseline = state.baseline ?? max(kept, 0)
            state.baseline = baseline
            let seconds = Double(now &- state.start) / 1e9
            let rate = seconds > 0.2 && done > baseline ? Double(done - baseline) / seconds : nil
            var parts = [(state.label ?? label) + ":", Self.bytes(done)]
            if let total, total > 0 {
                parts[1] += " of " + Self.bytes(total) + String(format: " (%.0f%%)", min(100, Double(done) * 100 / Double(total)))
            }
            if let rate {
                parts.append(Self.bytes(UInt64(rate)) + "/s")
                if let total, total > done { parts.append(Self.duration(Double(total - done) / rate) + " left") }
            }
            return parts.joined(separator: " ")
        }
        if let text { Output.standardError("\r\u{1B}[K" + text) }
    }

    /// Shows `progress` of files and bytes: "packing: 1234 of 50000 files, 12.3 MiB of 1.1 GiB
    /// (1%), 45.6 MiB/s, 0:12 left".
    func update(_ progress: WorkProgress) {
        Events.current?.progress(
            bytesDone: progress.bytesDone, bytesTotal: progress.bytesTotal, filesDone: progress.itemsDone, filesTotal: progress.itemsTotal,
            finished: progress.finished)
        guard enabled else { return }
        let text: String? = state.withLock { state in
            let now = DispatchTime.now().uptimeNanoseconds
            guard progress.finished || now &- state.last >= 100_000_000 else { return nil }
            state.last = now
            state.shown = true
            let seconds = Double(now &- state.start) / 1e9
            var parts = ["\(label): \(progress.itemsDone) of \(progress.itemsTotal) file\(progress.itemsTotal == 1 ? "" : "s")"]
            var bytes = Self.bytes(progress.bytesDone) + " of " + Self.bytes(progress.bytesTotal)
            if progress.bytesTotal > 0 {
                bytes += String(format: " (%.0f%%)", min(100, Double(progress.bytesDone) * 100 / Double(progress.bytesTotal)))
            }
            parts.append(bytes)
            if seconds > 0.2, progress.bytesDone > 0 {
                let rate = Double(progress.bytesDone) / seconds
                parts.append(Self.bytes(UInt64(rate)) + "/s")
                if progress.bytesTotal > progress.bytesDone { parts.append(Self.duration(Double(progress.bytesTotal - progress.bytesDone) / rate) + " left") }
            }
            return parts.joined(separator: ", ")
        }
        if let text { Output.standardError("\r\u{1B}[K" + text) }
    }

    /// Runs `work` with a progress line labelled `label` (a handler for the library's
    /// `progress` option), and clears the line afterwards, whatever happens.
    static func showing<R>(_ label: String, output: OutputOptions, _ work: (ProgressHandler?) throws -> R) rethrows -> R {
        let line = ProgressLine(label, output: output)
        guard line.enabled || Events.current != nil else { return try work(nil) }
        defer { line.finish() }
        return try work { line.update($0) }
    }

    /// Names what the line shows from now on (the package after the metadata), with
    /// its own rate. Returns false when it already did.
    @discardableResult
    func relabel(_ text: String) -> Bool {
        let escaped = Output.escaped(text)
        return state.withLock { state in
            guard (state.label ?? label) != escaped else { return false }
            state.label = escaped
            state.start = DispatchTime.now().uptimeNanoseconds
            state.baseline = nil
            return true
        }
    }

    /// Clears the line, so that what follows starts on a clean one.
    func finish() {
        guard enabled else { return }
        let shown = state.withLock { state in
            defer { state.shown = false }
            return state.shown
        }
        if shown { Output.standardError("\r\u{1B}[K") }
    }

    /// A warning on a line of its own (the progress line is cleared first and redrawn by the next update).
    func warn(_ text: String) {
        finish()
        Output.warn(text)
    }

    static func bytes(_ count: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds < 360_000 else { return "--:--" }
        let total = Int(seconds.rounded(.up))
        return total >= 3600
            ? String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
            : String(format: "%d:%02d", total / 60, total % 60)
    }
}

extension ProgressLine {
    /// A progress handler for a download of `url`: the updating line, and a warning (shown on
    /// a pipe too, for logs) before each retry.
    static func download(_ url: String, output: OutputOptions) -> (ProgressLine, @Sendable (DownloadProgress) -> Void) {
        let line = ProgressLine("downloading " + url, output: output)
        return (
            line,
            { progress in
                // A repository's metadata first, then the package: the line names what it shows.
                if !progress.url.isEmpty { line.relabel("downloading " + progress.url) }
                if let retry = progress.retry {
                    line.warn("\(retry.reason); trying again in \(String(format: "%g", retry.delay)) s (attempt \(retry.attempt) of \(retry.attempts))")
                } else {
                    line.update(bytes: progress.received, of: progress.expected, kept: progress.resumedFrom)
                }
            }
        )
    }
}

extension ProgressLine {
    /// Runs `work` (a download with `options`) with the progress line of `url` attached, on
    /// Signet's own threads, and clears the line afterwards.
    static func downloading<R: Sendable>(
        _ url: String, options: DownloadOptions, output: OutputOptions,
        _ work: @escaping @Sendable (DownloadOptions) async throws -> R
    ) throws -> R {
        var options = options
        let (line, progress) = download(url, output: output)
        options.progress = progress
        defer { line.finish() }
        return try Blocking.wait { [options] in try await work(options) }
    }
}

/// Runs the library's async API from a synchronous command, on the calling thread: the task
/// prefers an executor whose jobs that thread runs until the work is done. Swift's global
/// executor is never used: its worker threads are libdispatch's, which set their priority from
/// a QoS class as they start, and a systemd unit that refuses that (`@resources`) would log
/// "Failed to set thread priority" on every run. The library's blocking
/// work runs on its own threads and resumes the task here.
enum Blocking {
    private final class Box<R>: @unchecked Sendable {
        var result: Result<R, any Error>?
    }

    /// The calling thread as a task executor: jobs are queued and run by ``run()``.
    private final class CallingThread: TaskExecutor, @unchecked Sendable {
        private let condition = NSCondition()
        private var jobs: [UnownedJob] = []
        private var finished = false

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            condition.lock()
            jobs.append(job)
            condition.signal()
            condition.unlock()
        }

        /// Marks the work done (from a job, so on the calling thread).
        func finish() {
            condition.lock()
            finished = true
            condition.unlock()
        }

        /// Runs the queued jobs in order until ``finish()`` was called and none is left.
        func run() {
            while true {
                condition.lock()
                while jobs.isEmpty && !finished { condition.wait() }
                if jobs.isEmpty {
                    condition.unlock()
                    return
                }
                let job = jobs.removeFirst()
                condition.unlock()
                job.runSynchronously(on: asUnownedTaskExecutor())
            }
        }
    }

    static func wait<R: Sendable>(_ work: @escaping @Sendable () async throws -> R) throws -> R {
        let box = Box<R>()
        let executor = CallingThread()
        Task(executorPreference: executor) {
            do { box.result = .success(try await work()) } catch { box.result = .failure(error) }
            executor.finish()
        }
        executor.run()
        return try box.result!.get()
    }
}
