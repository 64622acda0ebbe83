import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
import SignetCore

/// One connection that fetches byte ranges of one URL (``RangedInput``), under Signet's TLS
/// policy and time limits (``Downloader/configure(_:url:options:check:errorBuffer:)``).
package final class RangeClient {
    /// The server answered a range request with the whole file, or gave no validator: ranges
    /// cannot be used for this package (the caller downloads it whole).
    package struct Unsupported: Error {
        let reason: String
        /// The whole package, when the first request was answered with it and the caller gave
        /// a ``Downloader/FullDownload`` to stream it into (complete; nil otherwise).
        package var download: DownloadResult? = nil
        /// Range requests made and body bytes they received (the full download's aside), for
        /// the report of every pass.
        package var requests = 0
        package var bytesReceived: UInt64 = 0
    }

    /// Where the body goes when the first request is answered with the whole file, instead of
    /// being aborted and asked for again (nil: aborted, for a caller that cannot use it).
    package var whole: Downloader.FullDownload?
    /// The full download the first request became.
    private var takenOver: Downloader.TakenOver?

    package let url: String
    let options: DownloadOptions
    private let request: CurlRequest
    private let deadline: UInt64
    /// The first answer's validator, sent as `If-Range` with every later request.
    package private(set) var validator: String?
    package private(set) var total: Int64 = -1
    package private(set) var requests = 0
    package private(set) var bytesReceived: UInt64 = 0

    // The answer being received.
    private var status = 0
    private var response = ResponseHeaders()
    private var contentRange: (start: Int64, end: Int64, total: Int64)? { response.contentRange }
    private var wanted: (start: Int64, end: Int64)?
    /// The suffix the probe asked for: its answer is never longer.
    private var probeLength: Int64?
    private var received: Int64 = 0
    private var sink: ((UnsafeRawBufferPointer) throws -> Void)?
    private var stop: (any Error)?
    /// The ranges of a request for several (``fetch(several:restart:_:)``), its answer's parser
    /// and where the parts' bytes go.
    private var several: [ClosedRange<Int64>]?
    private var parts: MultipartRanges?
    private var partSink: ((Int64, UnsafeRawBufferPointer) throws -> Void)?

    /// Whether the server answers a request for several ranges with all of them in one
    /// `multipart/byteranges` answer: nil until one was asked; false after a server answered
    /// one with anything else (the ranges are then asked for one request at a time).
    package private(set) var multipart: Bool?
    /// Most parts the server put in one answer when it served fewer than asked (lighttpd
    /// serves the first 10): later requests ask for no more.
    package private(set) var partsPerRequest: Int?
    /// The last request failed because its answer broke the rules (a lying or malformed
    /// answer, an encoding it may not use), not because the link dropped: nothing of it is used.
    package private(set) var refusedAnswer = false

    /// A request for several ranges was answered with something other than 206 (a server that
    /// serves one range at a time, or a package that changed: asking for one range tells which).
    package struct SeveralUnsupported: Error {}

    /// Set when the caller's task was cancelled: the request in flight stops.
    private let cancelled: CancellationFlag?
    /// Called on libcurl's progress ticks (several a second, bytes arriving or not), so that a
    /// progress display shows a stalled transfer's last bytes.
    package var onTick: (() -> Void)? = nil

    package init(url: String, options: DownloadOptions, cancelled: CancellationFlag? = nil) throws {
        self.cancelled = cancelled
        try Downloader.checkScheme(url, policy: options.tls)
        request = try CurlRequest(url: url, options: options)
        self.url = url
        self.options = options
        deadline = Downloader.deadline(options)
    }

    /// The last `length` bytes (all of a smaller file): where they start and the file's size.
    /// The answer is bounded by what was asked: a part longer than `length`, or a file larger
    /// than `--max-download-size` (or than its signed length), is refused at its first byte,
    /// never held.
    package func probe(suffix length: Int64, restart: () -> Void = {}, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws -> (
        start: Int64, total: Int64
    ) {
        probeLength = length
        defer { probeLength = nil }
        try retrying(restart: restart) { try perform(range: "-\(length)", wanted: nil, body) }
        guard status == 206, let range = contentRange else {
            throw unsupported("the server answered a range request with HTTP \(status)")
        }
        guard let validator = response.validator else {
            throw unsupported(
                "the server gives no strong validator (a strong ETag, or a Last-Modified at least 60 s older than its Date) to pin range requests to one file")
        }
        guard range.total > 0, range.end == range.total - 1, received == range.end - range.start + 1 else {
            throw refused("answered the first range request with bytes \(range.start)-\(range.end)/\(range.total) and \(received) bytes")
        }
        self.validator = validator
        total = range.total
        return (range.start, range.total)
    }

    /// ``Unsupported`` with what the requests so far cost.
    private func unsupported(_ reason: String, download: DownloadResult? = nil) -> Unsupported {
        Unsupported(reason: reason, download: download, requests: requests, bytesReceived: bytesReceived)
    }

    /// A failure another attempt may not have (``Downloader/isTransient(_:status:)``).
    private struct Transient: Error {
        let error: SignetError
    }

    /// Bytes `start...end` of the same file, to `body`. A transient failure (connection reset,
    /// time-out, a body cut short, HTTP 5xx) is tried again up to `--retries` times after
    /// `--retry-delay` seconds, doubled each time; `restart` is called first, and `body` then
    /// sees the range from its start again.
    package func fetch(_ start: Int64, _ end: Int64, restart: () -> Void = {}, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        refusedAnswer = false
        try retrying(restart: restart) { try fetchOnce(start, end, body) }
    }

    /// Runs `request`, again after a transient failure, up to `--retries` more times.
    private func retrying<R>(restart: () -> Void, _ request: () throws -> R) throws -> R {
        let attempts = 1 + max(0, options.retries)
        for attempt in 1...attempts {
            do {
                return try request()
            } catch let failure as Transient {
                guard attempt < attempts else { throw failure.error }
                try Downloader.pauseBeforeRetry(min(30, max(0, options.retryDelay) * pow(2, Double(attempt - 1))), cancelled: cancelled)
                restart()
            }
        }
        throw SignetError(.network, "cannot read '\(Download.redacted(url))'") // not reached: the last attempt throws
    }

    private func fetchOnce(_ start: Int64, _ end: Int64, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        guard validator != nil, start >= 0, start <= end, end < total else {
            throw SignetError(.io, "an internal range request \(start)-\(end) outside the package of \(total) bytes")
        }
        try perform(range: "\(start)-\(end)", wanted: (start, end), body)
        guard received == end - start + 1 else {
            throw refused("sent \(received) bytes for the range \(start)-\(end), not \(end - start + 1)")
        }
    }

    /// Several ranges (ascending, apart, within the file) in one request, answered as
    /// `multipart/byteranges` (or as one part where the server coalesced them), each part
    /// checked by ``MultipartRanges`` before `body` sees its bytes with the file offset of the
    /// first. Returns how many of the ranges, from the first, arrived: a server that serves
    /// fewer is from then on asked one range at a time (``multipart`` false), as is one that
    /// answers with anything but 206 (``SeveralUnsupported``: the caller asks for one range,
    /// which tells such a server from a package that changed). Retried as ``fetch(_:_:restart:_:)``.
    package func fetch(several ranges: [ClosedRange<Int64>], restart: () -> Void = {}, _ body: @escaping (Int64, UnsafeRawBufferPointer) throws -> Void) throws
        -> Int
    {
        refusedAnswer = false
        do {
            let covered = try retrying(restart: restart) { try fetchSeveralOnce(ranges, body) }
            if covered < ranges.count {
                // Fewer than asked: at most that many from now on (one: one range at a time).
                multipart = covered > 1
                partsPerRequest = covered > 1 ? min(covered, partsPerRequest ?? covered) : nil
            } else {
                multipart = true
            }
            return covered
        } catch let failure as SeveralUnsupported {
            multipart = false
            throw failure
        }
    }

    private func fetchSeveralOnce(_ ranges: [ClosedRange<Int64>], _ body: @escaping (Int64, UnsafeRawBufferPointer) throws -> Void) throws -> Int {
        guard validator != nil, ranges.count > 1, ranges[0].lowerBound >= 0, ranges[ranges.count - 1].upperBound < total,
            zip(ranges, ranges.dropFirst()).allSatisfy({ $0.upperBound + 1 < $1.lowerBound })
        else {
            throw SignetError(.io, "an internal request for \(ranges.count) ranges not ascending and apart within the package of \(total) bytes")
        }
        several = ranges
        parts = nil
        partSink = body
        defer { several = nil; parts = nil; partSink = nil }
        try perform(range: ranges.map { "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ","), wanted: nil, pinned: true) { _ in }
        guard let parts else { throw refused("answered a request for several ranges without a body") }
        do {
            try parts.finish()
        } catch let refusal as MultipartRanges.Refused {
            throw refused(refusal.reason)
        }
        return parts.covered
    }

    /// The whole file instead of the range: `If-Range` did not match (the package was replaced
    /// on the server), or the server stopped answering ranges.
    private func changed(_ status: Int) -> SignetError {
        SignetError(
            .packageChanged,
            "'\(Download.redacted(url))' answered a range request with HTTP \(status): the package changed on the server during the update (or the server stopped answering ranges). Nothing was installed; run again"
        )
    }

    private func refused(_ what: String) -> SignetError {
        refusedAnswer = true
        return SignetError(
            .network,
            "'\(Download.redacted(url))' \(what); a range answer must be exactly what was asked (the package may have changed on the server). Nothing was installed; try again, or use --full-download"
        )
    }

    /// One request. `pinned` (a request after the first: `wanted`'s, or several ranges) sends
    /// `If-Range` with the first answer's validator.
    private func perform(range: String, wanted: (start: Int64, end: Int64)?, pinned: Bool? = nil, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void)
        throws
    {
        let pinned = pinned ?? (wanted != nil)
        status = 0
        response = ResponseHeaders()
        received = 0
        stop = nil
        self.wanted = wanted
        sink = body
        defer { sink = nil }
        let left = Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds) / 1_000_000
        guard left > 0 else {
            throw SignetError(.network, "cannot read '\(Download.redacted(url))' within --max-time \(Int(options.maxTime)) s")
        }
        // Interrupted: no new request (what arrived is used, then the run stops).
        if TemporaryFiles.isInterrupted { throw SignetError(.interrupted, "interrupted; nothing was installed") }
        requests += 1
        request.onHeader = { [unowned self] in self.header($0) }
        request.onBody = { [unowned self] in self.body($0) }
        request.onTick = { [unowned self] in
            self.onTick?()
            return !TemporaryFiles.isInterrupted && self.cancelled?.isSet != true
        }
        // Every request after the first is pinned to the first answer's file.
        let outcome = try request.perform(range: range, headers: pinned ? validator.map { ["If-Range: " + $0] } ?? [] : [], timeout: Int(left))
        if let taken = takenOver {
            takenOver = nil
            let reason = "the server answered a range request with HTTP \(outcome.status)"
            do {
                throw unsupported(reason, download: try taken.conclude(outcome))
            } catch let failure as Downloader.Transfer.Failure {
                // Cut short: the full download continues (or starts over) from what arrived.
                guard failure.transient else { throw failure.error }
                throw unsupported(reason)
            }
        }
        if let stop { throw stop }
        if outcome.code == CURLE_ABORTED_BY_CALLBACK, TemporaryFiles.isInterrupted {
            throw SignetError(.interrupted, "interrupted; nothing was installed")
        }
        if outcome.code == CURLE_ABORTED_BY_CALLBACK, cancelled?.isSet == true { throw CancellationError() }
        guard outcome.code == CURLE_OK else {
            let error = Downloader.error(outcome.code, status: status, message: outcome.message, effectiveURL: outcome.effectiveURL, check: request.check)
            if Downloader.isTransient(outcome.code, status: status) { throw Transient(error: error) }
            throw error
        }
        status = outcome.status
        if several != nil, status != 206 { throw SeveralUnsupported() }
        if wanted != nil, status != 206 {
            throw status == 200 ? changed(status) : refused("answered a range request with HTTP \(status)")
        }
    }

    /// Response headers of the final answer (a redirect's are reset by its status line).
    private func header(_ line: String) {
        response.take(line)
        status = response.status
    }

    /// Body bytes: checked against what was asked before `sink` sees them.
    private func body(_ chunk: UnsafeRawBufferPointer) -> Bool {
        do {
            if received == 0 {
                if let refusal = response.refusedEncoding(url: Download.redacted(url)) {
                    refusedAnswer = true
                    throw refusal
                }
                let current = request.status
                if let several {
                    // Several ranges: 206 with parts (or one coalesced part), else asked singly.
                    guard current == 206 else { throw SeveralUnsupported() }
                    do {
                        if let type = response.contentType, MultipartRanges.boundary(type) != nil {
                            parts = try MultipartRanges(contentType: type, asked: several, total: total)
                        } else if let range = contentRange {
                            parts = try MultipartRanges(single: range, asked: several, total: total)
                        } else {
                            throw refused("answered a request for several ranges with neither parts nor a Content-Range")
                        }
                    } catch let refusal as MultipartRanges.Refused {
                        // A part coalesced across a gap too large to take: the transfer stops at its
                        // headers, nothing of it kept, and the ranges are asked for singly.
                        if refusal.coalescedGap { throw SeveralUnsupported() }
                        throw refused(refusal.reason)
                    }
                }
                if current == 200, wanted == nil, several == nil, let whole {
                    // The whole file: it becomes the full download from this first byte on.
                    let taken = try Downloader.TakenOver(whole, request: request, response: response, deadline: deadline)
                    takenOver = taken
                    return taken.receive(chunk)
                }
                if current != 206 {
                    // The whole file (ranges ignored, or If-Range failed: the file changed).
                    throw wanted == nil
                        ? unsupported("the server answered a range request with HTTP \(current)")
                        : changed(current)
                }
                if let probeLength, let range = contentRange {
                    guard range.total >= 0, UInt64(range.total) <= options.maxSize else {
                        throw options.tooLarge(url, path: nil)
                    }
                    if let signed = options.signedLength, UInt64(range.total) != signed {
                        throw SignetError(
                            .indexMismatch, "'\(Download.redacted(url))' is \(range.total) bytes; its signed metadata states \(signed). Nothing was installed",
                            path: url)
                    }
                    guard range.end >= range.start, range.end - range.start + 1 <= probeLength else {
                        throw refused("answered a request for its last \(probeLength) bytes with bytes \(range.start)-\(range.end)/\(range.total)")
                    }
                }
                if let wanted {
                    guard let range = contentRange, range.start == wanted.start, range.end == wanted.end, range.total == total else {
                        let shown = contentRange.map { "\($0.start)-\($0.end)/\($0.total)" } ?? "none"
                        throw refused("answered the range \(wanted.start)-\(wanted.end) of \(total) bytes with Content-Range \(shown)")
                    }
                }
            }
            if several != nil, var parser = parts, let partSink {
                // The parser bounds every byte that is not a part's.
                received += Int64(chunk.count)
                bytesReceived += UInt64(chunk.count)
                parts = nil
                do {
                    try parser.take(chunk, partSink)
                } catch let refusal as MultipartRanges.Refused {
                    // A part coalesced across a gap too large to take: the transfer stops at its
                    // headers, nothing of it kept, and the ranges are asked for singly.
                    if refusal.coalescedGap { throw SeveralUnsupported() }
                    throw refused(refusal.reason)
                }
                parts = parser
                return true
            }
            let limit = wanted.map { $0.end - $0.start + 1 } ?? contentRange.map { $0.end - $0.start + 1 } ?? Int64.max
            guard received + Int64(chunk.count) <= limit else { throw refused("sent more bytes than the range it was asked for") }
            received += Int64(chunk.count)
            bytesReceived += UInt64(chunk.count)
            try sink?(chunk)
            return true
        } catch {
            stop = error
            return false
        }
    }
}
