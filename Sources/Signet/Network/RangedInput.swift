import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
internal import CSignetShims

/// A package on an HTTPS server, read with HTTP range requests instead of being downloaded
/// (FORMAT.md §5, "Range requests"): the archive layer reads it as it reads a file, with the
/// same checks, and nothing of it is stored on the device.
///
/// Every request goes over one reused connection and carries `If-Range` with the validator
/// of the first answer (a strong ETag, else Last-Modified), so a package replaced on the server
/// while it is read is never mixed with the old one: the server then answers 200, which is
/// refused. Each answer must be 206 for exactly the range asked, of a file of the same size,
/// with exactly that many bytes.
///
/// What is fetched: first the last ``probeSize`` bytes (the end records); then the central
/// directory, which is kept (with the 64 KiB before it, which libzip reads when it opens a
/// window of entries) while it is at most ``pinLimit``. Below the first `.signet/` entry (the
/// resources of a Signet package) nothing is fetched but the byte ranges a caller planned
/// (``plan(_:)``), each group of entries closer than ``gapLimit`` in one request of at most
/// ``planRequest`` bytes, read as they are needed. Elsewhere (the package's own entries)
/// sequential reads fetch ahead, from the byte asked for, never before it. Memory is bounded:
/// the kept directory plus at most ``cacheLimit`` of fetched ranges.
final class RangedInput: ArchiveInput {
    /// The first request: the end records (22 bytes and a comment of up to 65,535) and, for
    /// most packages, the central directory.
    static let probeSize: Int64 = 22 + 65_535
    /// Bytes fetched at least per request outside planned ranges.
    static let blockSize: Int64 = 256 << 10
    /// Most blocks one such request fetches when reads go on sequentially.
    static let maximumRun: Int64 = 16
    /// Planned entries closer than this are fetched in one request, the gap read through.
    static let gapLimit: Int64 = 64 << 10
    /// The same for the signature entries of the resources fetched: small entries among many
    /// that are not read (issue 36: only the changed files' signature entries are fetched).
    static let signatureGapLimit: Int64 = 4 << 10
    /// Most bytes one request for planned ranges asks for.
    static let planRequest: Int64 = 4 << 20
    /// Largest central directory kept whole.
    static let pinLimit: Int64 = 32 << 20
    /// Most fetched bytes kept besides the directory.
    static let cacheLimit = 16 << 20

    let path: String
    let size: Int64
    /// The URL as given (``path`` is it without a password, for messages).
    var url: String { client.url }
    private let client: RangeClient
    /// Fetched ranges, the most recently used last.
    private var cached: [(start: Int64, bytes: [UInt8])] = []
    private var cachedBytes = 0
    /// The central directory and what comes after it (and the 64 KiB before), kept.
    private var pinned: (start: Int64, bytes: [UInt8])?
    /// Below this offset only planned ranges are fetched (the first `.signet/` entry).
    private var floor: Int64 = 0
    /// Planned ranges, merged and sorted.
    private var groups: [Range<Int64>] = []
    private var run: Int64 = 1
    private var lastEnd: Int64 = -1

    /// Requests made and bytes received, for reports.
    var requests: Int { client.requests }
    var bytesReceived: UInt64 { client.bytesReceived }
    /// Called with the bytes of each answer as they arrive (progress displays).
    var received: ((Int) -> Void)? = nil

    /// Opens `url`: one request for the last ``probeSize`` bytes, which tells the size and the
    /// validator. Throws ``RangeClient/Unsupported`` when the server does not answer range
    /// requests (or gives no validator to pin them to one file): the caller downloads the
    /// whole package.
    /// A server that answers the first request with the whole package: with `whole`, its body
    /// streams into that full download, which ``RangeClient/Unsupported/download`` then holds.
    init(url: String, options: DownloadOptions, cancelled: CancellationFlag? = nil, whole: Downloader.FullDownload? = nil) throws {
        client = try RangeClient(url: url, options: options, cancelled: cancelled)
        client.whole = whole
        path = Download.redacted(url)
        var tail: [UInt8] = []
        let (start, total) = try client.probe(suffix: Self.probeSize, restart: { tail.removeAll() }) { tail.append(contentsOf: $0) }
        size = total
        remember(start, tail)
        lastEnd = start + Int64(tail.count)
    }

    /// Keeps the directory's bytes, and learns where the package's own entries start.
    func directoryRead(_ directory: CentralDirectory.Directory) throws {
        let signet = Array((TreeLayout.directory + "/").utf8)
        var firstOwn = Int64(directory.offset), lastResourceEnd: Int64 = 0
        for record in directory {
            let offset = Int64(record.localHeaderOffset)
            if directory.name(of: record).starts(with: signet) {
                firstOwn = min(firstOwn, offset)
            } else {
                lastResourceEnd = max(lastResourceEnd, offset + 1)
            }
        }
        // A package laid out otherwise (a bare one, or another tool's) has no such line: then
        // only the directory is above it.
        floor = lastResourceEnd <= firstOwn ? firstOwn : Int64(directory.offset)
        // The package's own entries other than per-file signatures (manifest, its signature,
        // the record's signature, certificates) are read whole: planned exactly, so that
        // reading ahead never runs on into the signature entries, most of which an update
        // does not read.
        let signatures = Array((TreeLayout.signatures + "/").utf8)
        var own: [Range<Int64>] = []
        for position in directory.startIndex..<directory.endIndex {
            let name = directory.name(of: directory[position])
            guard name.starts(with: signet), !name.starts(with: signatures), let span = directory.span(ofRecord: position) else { continue }
            own.append(Int64(span.lowerBound)..<Int64(span.upperBound))
        }
        plan(own)
        let start = max(0, Int64(directory.offset) - 65_557)
        guard size - start <= Self.pinLimit else { return }
        var bytes = [UInt8](repeating: 0, count: Int(size - start))
        let done = try bytes.withUnsafeMutableBytes { try read(fullyAt: start, into: $0) }
        guard done == bytes.count else { return }
        pinned = (start, bytes)
        // What the cache held of it is now kept twice: drop it.
        cached.removeAll { $0.start >= start }
        cachedBytes = cached.reduce(0) { $0 + $1.bytes.count }
    }

    /// Ranges that will be read: entries to fetch, merged with each other where closer than
    /// `gap` (``gapLimit`` unless said: a gap read through costs less than another request),
    /// then with those planned before where they touch.
    func plan(_ ranges: [Range<Int64>], gap: Int64 = RangedInput.gapLimit) {
        func merge(_ ranges: [Range<Int64>], gap: Int64) -> [Range<Int64>] {
            var merged: [Range<Int64>] = []
            for range in ranges.filter({ !$0.isEmpty }).sorted(by: { $0.lowerBound < $1.lowerBound }) {
                if let last = merged.last, range.lowerBound <= last.upperBound + gap {
                    merged[merged.count - 1] = last.lowerBound..<max(last.upperBound, range.upperBound)
                } else {
                    merged.append(range)
                }
            }
            return merged
        }
        groups = merge(groups + merge(ranges, gap: gap), gap: 0)
    }

    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset >= 0 else { return 0 }
        var done = 0
        while done < buffer.count, offset + Int64(done) < size {
            let position = offset + Int64(done)
            let count = try withRange(containing: position, wanted: Int64(buffer.count - done)) { start, bytes in
                let from = Int(position - start)
                let count = min(bytes.count - from, buffer.count - done)
                UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)]).copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[from..<(from + count)]))
                return count
            }
            done += count
        }
        return done
    }

    /// Runs `body` on kept or fetched bytes starting at or before `position` and holding it.
    private func withRange<R>(containing position: Int64, wanted: Int64, _ body: (Int64, UnsafeRawBufferPointer) -> R) throws -> R {
        if let pinned, position >= pinned.start, position - pinned.start < Int64(pinned.bytes.count) {
            return pinned.bytes.withUnsafeBytes { body(pinned.start, $0) }
        }
        if let index = cached.lastIndex(where: { position >= $0.start && position - $0.start < Int64($0.bytes.count) }) {
            let hit = cached[index]
            if index != cached.count - 1 { cached.remove(at: index); cached.append(hit) }
            return hit.bytes.withUnsafeBytes { body(hit.start, $0) }
        }
        let end: Int64
        if let group = groups.first(where: { $0.contains(position) }) {
            end = min(group.upperBound, position + Self.planRequest)
        } else if position >= floor {
            // Reading on from where the last request ended: fetch further ahead each time.
            run = position == lastEnd ? min(run * 2, Self.maximumRun) : 1
            end = min(size, position + max(wanted, run * Self.blockSize), nextHeld(after: position))
        } else {
            // Unplanned bytes below the package's own entries: only what was asked.
            end = min(size, floor, position + max(wanted, 1))
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(end - position))
        let report = received
        try client.fetch(position, end - 1, restart: { bytes.removeAll(keepingCapacity: true) }) { chunk in
            bytes.append(contentsOf: chunk)
            report?(chunk.count)
        }
        lastEnd = end
        remember(position, bytes)
        return bytes.withUnsafeBytes { body(position, $0) }
    }

    /// Where the next kept or cached bytes after `position` start (the end of the file if
    /// none): a fetch stops there rather than fetch them again.
    private func nextHeld(after position: Int64) -> Int64 {
        var next = size
        if let pinned, pinned.start > position { next = pinned.start }
        for range in cached where range.start > position { next = min(next, range.start) }
        return next
    }

    private func remember(_ start: Int64, _ bytes: [UInt8]) {
        cached.append((start, bytes))
        cachedBytes += bytes.count
        while cachedBytes > Self.cacheLimit, cached.count > 1 {
            cachedBytes -= cached.removeFirst().bytes.count
        }
    }
}

/// One connection that fetches byte ranges of one URL (``RangedInput``), under Signet's TLS
/// policy and time limits (``Downloader/configure(_:url:options:check:errorBuffer:)``).
final class RangeClient {
    /// The server answered a range request with the whole file, or gave no validator: ranges
    /// cannot be used for this package (the caller downloads it whole).
    struct Unsupported: Error {
        let reason: String
        /// The whole package, when the first request was answered with it and the caller gave
        /// a ``Downloader/FullDownload`` to stream it into (complete; nil otherwise).
        var download: DownloadResult? = nil
        /// Range requests made and body bytes they received (the full download's aside), for
        /// the report of every pass.
        var requests = 0
        var bytesReceived: UInt64 = 0
    }

    /// Where the body goes when the first request is answered with the whole file, instead of
    /// being aborted and asked for again (nil: aborted, for a caller that cannot use it).
    var whole: Downloader.FullDownload?
    /// The full download the first request became.
    private var takenOver: Downloader.TakenOver?

    let url: String
    let options: DownloadOptions
    private let request: CurlRequest
    private let deadline: UInt64
    /// The first answer's validator, sent as `If-Range` with every later request.
    private(set) var validator: String?
    private(set) var total: Int64 = -1
    private(set) var requests = 0
    private(set) var bytesReceived: UInt64 = 0

    // The answer being received.
    private var status = 0
    private var response = ResponseHeaders()
    private var contentRange: (start: Int64, end: Int64, total: Int64)? { response.contentRange }
    private var wanted: (start: Int64, end: Int64)?
    private var received: Int64 = 0
    private var sink: ((UnsafeRawBufferPointer) throws -> Void)?
    private var stop: (any Error)?

    /// Set when the caller's task was cancelled: the request in flight stops.
    private let cancelled: CancellationFlag?

    init(url: String, options: DownloadOptions, cancelled: CancellationFlag? = nil) throws {
        self.cancelled = cancelled
        try Downloader.checkScheme(url, policy: options.tls)
        request = try CurlRequest(url: url, options: options)
        self.url = url
        self.options = options
        deadline = Downloader.deadline(options)
    }

    /// The last `length` bytes (all of a smaller file): where they start and the file's size.
    func probe(suffix length: Int64, restart: () -> Void = {}, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws -> (start: Int64, total: Int64) {
        try retrying(restart: restart) { try perform(range: "-\(length)", wanted: nil, body) }
        guard status == 206, let range = contentRange else {
            throw unsupported("the server answered a range request with HTTP \(status)")
        }
        guard let validator = response.validator else {
            throw unsupported("the server gives no strong validator (a strong ETag, or a Last-Modified at least 60 s older than its Date) to pin range requests to one file")
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
    func fetch(_ start: Int64, _ end: Int64, restart: () -> Void = {}, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
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
        throw SignetError(.network, "cannot read '\(Download.redacted(url))'")   // not reached: the last attempt throws
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

    /// The whole file instead of the range: `If-Range` did not match (the package was replaced
    /// on the server), or the server stopped answering ranges.
    private func changed(_ status: Int) -> SignetError {
        SignetError(.packageChanged, "'\(Download.redacted(url))' answered a range request with HTTP \(status): the package changed on the server during the update (or the server stopped answering ranges). Nothing was installed; run again")
    }

    private func refused(_ what: String) -> SignetError {
        SignetError(.network, "'\(Download.redacted(url))' \(what); a range answer must be exactly what was asked (the package may have changed on the server). Nothing was installed; try again, or use --full-download")
    }

    private func perform(range: String, wanted: (start: Int64, end: Int64)?, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
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
        requests += 1
        request.onHeader = { [unowned self] in self.header($0) }
        request.onBody = { [unowned self] in self.body($0) }
        request.onTick = { [unowned self] in !TemporaryFiles.isInterrupted && self.cancelled?.isSet != true }
        // Every request after the first is pinned to the first answer's file.
        let outcome = try request.perform(range: range, headers: wanted == nil ? [] : validator.map { ["If-Range: " + $0] } ?? [], timeout: Int(left))
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
                if let refusal = response.refusedEncoding(url: Download.redacted(url)) { throw refusal }
                let current = request.status
                if current == 200, wanted == nil, let whole {
                    // The whole file: it becomes the full download from this first byte on.
                    let taken = try Downloader.TakenOver(whole, request: request, response: response, deadline: deadline)
                    takenOver = taken
                    return taken.receive(chunk)
                }
                if current != 206 {
                    // The whole file (ranges ignored, or If-Range failed: the file changed).
                    throw wanted == nil ? unsupported("the server answered a range request with HTTP \(current)")
                        : changed(current)
                }
                if let wanted {
                    guard let range = contentRange, range.start == wanted.start, range.end == wanted.end, range.total == total else {
                        let shown = contentRange.map { "\($0.start)-\($0.end)/\($0.total)" } ?? "none"
                        throw refused("answered the range \(wanted.start)-\(wanted.end) of \(total) bytes with Content-Range \(shown)")
                    }
                }
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
