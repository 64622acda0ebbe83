import Dispatch
import Synchronization

/// How far a long operation (pack, install, verify, re-verify, sign) has got: files and bytes
/// done of the totals known at its start.
public struct WorkProgress: Sendable, Equatable {
    /// Files finished.
    public let itemsDone: Int
    /// Files the operation will handle.
    public let itemsTotal: Int
    /// Bytes of content read or written so far.
    public let bytesDone: UInt64
    /// Bytes of content in all.
    public let bytesTotal: UInt64
    /// True in the last report, when everything is done.
    public let finished: Bool
}

/// The steps of an install or an update, as progress events name them: `refresh` (the
/// repository's metadata), `plan` (choosing the release), `download`, `verify` (the manifest and
/// the rules an install is held to), `stage` (the new tree beside DIR), `swap`, `hooks`,
/// `health-check`.
public enum WorkPhase: String, Sendable, CaseIterable {
    case refresh, plan, download, verify, stage, swap, hooks
    case healthCheck = "health-check"
}

/// Told each step as it starts, on the thread that runs it. It should return quickly.
public typealias PhaseHandler = @Sendable (WorkPhase) -> Void

/// Receives ``WorkProgress`` reports, from any thread, at most about 20 times a second (and once
/// more when the operation finishes). It should return quickly.
public typealias ProgressHandler = @Sendable (WorkProgress) -> Void

/// Counts an operation's progress from any number of threads and reports it, throttled, to a
/// ``ProgressHandler``.
package final class ProgressCounter: Sendable {
    private struct State {
        var items = 0
        var bytes: UInt64 = 0
        var lastReport: UInt64 = 0
    }

    private let handler: ProgressHandler
    private let itemsTotal: Int
    private let bytesTotal: UInt64
    private let state = Mutex(State())
    /// Reports at most this often (nanoseconds).
    private static let interval: UInt64 = 50_000_000

    package init(_ handler: @escaping ProgressHandler, items: Int, bytes: UInt64) {
        self.handler = handler
        itemsTotal = items
        bytesTotal = bytes
    }

    /// A counter for `handler`, or nil when there is none (so callers pay nothing).
    package static func make(_ handler: ProgressHandler?, items: Int, bytes: UInt64) -> ProgressCounter? {
        handler.map { ProgressCounter($0, items: items, bytes: bytes) }
    }

    /// Adds `bytes` of content and `items` finished files.
    package func add(bytes: Int = 0, items: Int = 0) {
        let report: WorkProgress? = state.withLock { state in
            state.bytes &+= UInt64(bytes)
            state.items += items
            let now = DispatchTime.now().uptimeNanoseconds
            guard now &- state.lastReport >= Self.interval else { return nil }
            state.lastReport = now
            return WorkProgress(itemsDone: state.items, itemsTotal: itemsTotal, bytesDone: state.bytes, bytesTotal: bytesTotal, finished: false)
        }
        if let report { handler(report) }
    }

    /// The last report: everything done.
    package func finish() {
        let report = state.withLock { state in
            WorkProgress(itemsDone: state.items, itemsTotal: itemsTotal, bytesDone: state.bytes, bytesTotal: bytesTotal, finished: true)
        }
        handler(report)
    }
}
