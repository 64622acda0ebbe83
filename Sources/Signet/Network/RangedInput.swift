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
/// with exactly that many bytes. Reads are served from a few cached blocks; sequential reads
/// fetch ahead (up to ``maximumRun`` blocks a request), so memory stays bounded
/// (``cacheLimit``) and small reads of the zip's headers do not each cost a request.
final class RangedInput: ArchiveInput {
    /// Bytes fetched at least per request.
    static let blockSize: Int64 = 1 << 20
    /// Most blocks one request fetches when reads go on sequentially.
    static let maximumRun: Int64 = 8
    /// Most bytes kept.
    static let cacheLimit = 16 << 20

    let path: String
    let size: Int64
    private let client: RangeClient
    /// Fetched ranges, the most recently used last.
    private var cached: [(start: Int64, bytes: [UInt8])] = []
    private var cachedBytes = 0
    private var run: Int64 = 1
    private var lastEnd: Int64 = -1

    /// Requests made and bytes received, for reports.
    var requests: Int { client.requests }
    var bytesReceived: UInt64 { client.bytesReceived }

    /// Opens `url`: one request for the last block, which tells the size and the validator.
    /// Throws ``RangeClient/Unsupported`` when the server does not answer range requests
    /// (or gives no validator to pin them to one file): the caller downloads the whole package.
    init(url: String, options: DownloadOptions) throws {
        client = try RangeClient(url: url, options: options)
        path = Download.redacted(url)
        var tail: [UInt8] = []
        let (start, total) = try client.probe(suffix: Self.blockSize) { tail.append(contentsOf: $0) }
        size = total
        remember(start, tail)
        lastEnd = start + Int64(tail.count)
    }

    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset >= 0 else { return 0 }
        var done = 0
        while done < buffer.count, offset + Int64(done) < size {
            let position = offset + Int64(done)
            let (start, bytes) = try block(containing: position)
            let from = Int(position - start)
            let count = min(bytes.count - from, buffer.count - done)
            bytes.withUnsafeBytes { source in
                UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)]).copyMemory(from: UnsafeRawBufferPointer(rebasing: source[from..<(from + count)]))
            }
            done += count
        }
        return done
    }

    /// The cached range holding `position`, fetched if none does.
    private func block(containing position: Int64) throws -> (Int64, [UInt8]) {
        if let index = cached.lastIndex(where: { position >= $0.start && position - $0.start < Int64($0.bytes.count) }) {
            let hit = cached[index]
            if index != cached.count - 1 { cached.remove(at: index); cached.append(hit) }
            return hit
        }
        let start = position - position % Self.blockSize
        // Reading on from where the last request ended: fetch further ahead each time.
        run = start == lastEnd || (lastEnd > start && lastEnd - start < Self.blockSize) ? min(run * 2, Self.maximumRun) : 1
        let end = min(size, start + run * Self.blockSize)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(end - start))
        try client.fetch(start, end - 1) { bytes.append(contentsOf: $0) }
        lastEnd = end
        remember(start, bytes)
        return (start, bytes)
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
    }

    let url: String
    let options: DownloadOptions
    private let check: TLSCheck
    private let curl: UnsafeMutableRawPointer
    private let errorBuffer: UnsafeMutablePointer<CChar>
    private var requestHeaders: UnsafeMutablePointer<curl_slist>?
    private let deadline: UInt64
    /// The first answer's validator, sent as `If-Range` with every later request.
    private(set) var validator: String?
    private(set) var total: Int64 = -1
    private(set) var requests = 0
    private(set) var bytesReceived: UInt64 = 0

    // The answer being received.
    private var status = 0
    private var contentRange: (start: Int64, end: Int64, total: Int64)?
    private var answerValidator: String?
    private var wanted: (start: Int64, end: Int64)?
    private var received: Int64 = 0
    private var sink: ((UnsafeRawBufferPointer) throws -> Void)?
    private var stop: (any Error)?

    init(url: String, options: DownloadOptions) throws {
        try Downloader.checkScheme(url, policy: options.tls)
        guard Downloader.ready else { throw SignetError(.crypto, "libcurl could not be initialised") }
        guard let curl = curl_easy_init() else { throw SignetError(.crypto, "libcurl could not start a transfer") }
        self.curl = curl
        self.url = url
        self.options = options
        check = TLSCheck(policy: options.tls)
        deadline = DispatchTime.now().uptimeNanoseconds &+ UInt64(max(1, min(options.maxTime, 30 * 86_400)) * 1e9)
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let me = Unmanaged.passUnretained(self).toOpaque()
        var ok = Downloader.configure(curl, url: url, options: options, check: check, errorBuffer: errorBuffer)
        func set(_ result: CURLcode) { ok = ok && result == CURLE_OK }
        set(signet_curl_setopt_pointer(curl, CURLOPT_HEADERDATA, me))
        set(signet_curl_setopt_data_callback(curl, CURLOPT_HEADERFUNCTION) { data, size, count, argument in
            guard let data, let argument else { return 0 }
            let line = String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self)
            Unmanaged<RangeClient>.fromOpaque(argument).takeUnretainedValue().header(line)
            return size * count
        })
        set(signet_curl_setopt_pointer(curl, CURLOPT_WRITEDATA, me))
        set(signet_curl_setopt_data_callback(curl, CURLOPT_WRITEFUNCTION) { data, size, count, argument in
            guard let data, let argument else { return 0 }
            let chunk = UnsafeRawBufferPointer(start: data, count: size * count)
            return Unmanaged<RangeClient>.fromOpaque(argument).takeUnretainedValue().body(chunk) ? size * count : 0
        })
        set(signet_curl_setopt_long(curl, CURLOPT_NOPROGRESS, 0))
        set(signet_curl_setopt_pointer(curl, CURLOPT_XFERINFODATA, me))
        set(signet_curl_setopt_progress_callback(curl) { argument, _, _, _, _ in
            TemporaryFiles.isInterrupted ? 1 : 0
        })
        guard ok else {
            // Every property is set: deinit runs and frees the handle and the buffer.
            throw SignetError(.crypto, "libcurl refused Signet's transfer settings (libcurl \(SignetVersion.curl))")
        }
    }

    deinit {
        curl_easy_cleanup(curl)
        curl_slist_free_all(requestHeaders)
        errorBuffer.deallocate()
    }

    /// The last `length` bytes (all of a smaller file): where they start and the file's size.
    func probe(suffix length: Int64, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws -> (start: Int64, total: Int64) {
        try perform(range: "-\(length)", wanted: nil, body)
        guard status == 206, let range = contentRange else {
            throw Unsupported(reason: "the server answered a range request with HTTP \(status)")
        }
        guard let validator = answerValidator else {
            throw Unsupported(reason: "the server gives no strong ETag or Last-Modified to pin range requests to one file")
        }
        guard range.total > 0, range.end == range.total - 1, received == range.end - range.start + 1 else {
            throw refused("answered the first range request with bytes \(range.start)-\(range.end)/\(range.total) and \(received) bytes")
        }
        self.validator = validator
        total = range.total
        return (range.start, range.total)
    }

    /// Bytes `start...end` of the same file, to `body`.
    func fetch(_ start: Int64, _ end: Int64, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        guard let validator, start >= 0, start <= end, end < total else {
            throw SignetError(.io, "an internal range request \(start)-\(end) outside the package of \(total) bytes")
        }
        curl_slist_free_all(requestHeaders)
        requestHeaders = curl_slist_append(nil, "If-Range: " + validator)
        guard signet_curl_setopt_pointer(curl, CURLOPT_HTTPHEADER, requestHeaders) == CURLE_OK else {
            throw SignetError(.crypto, "libcurl refused the If-Range header")
        }
        try perform(range: "\(start)-\(end)", wanted: (start, end), body)
        guard received == end - start + 1 else {
            throw refused("sent \(received) bytes for the range \(start)-\(end), not \(end - start + 1)")
        }
    }

    private func refused(_ what: String) -> SignetError {
        SignetError(.network, "'\(Download.redacted(url))' \(what); a range answer must be exactly what was asked (the package may have changed on the server). Nothing was installed; try again, or use --full-download")
    }

    private func perform(range: String, wanted: (start: Int64, end: Int64)?, _ body: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        status = 0
        contentRange = nil
        answerValidator = nil
        received = 0
        stop = nil
        self.wanted = wanted
        sink = body
        defer { sink = nil }
        errorBuffer.pointee = 0
        let left = Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds) / 1_000_000
        guard left > 0 else {
            throw SignetError(.network, "cannot read '\(Download.redacted(url))' within --max-time \(Int(options.maxTime)) s")
        }
        guard signet_curl_setopt_string(curl, CURLOPT_RANGE, range) == CURLE_OK,
              signet_curl_setopt_long(curl, CURLOPT_TIMEOUT_MS, Int(left)) == CURLE_OK else {
            throw SignetError(.crypto, "libcurl refused a range request")
        }
        requests += 1
        let code = curl_easy_perform(curl)
        if let stop { throw stop }
        if code == CURLE_ABORTED_BY_CALLBACK, TemporaryFiles.isInterrupted {
            throw SignetError(.interrupted, "interrupted; nothing was installed")
        }
        guard code == CURLE_OK else {
            var effective: UnsafeMutablePointer<CChar>? = nil
            _ = signet_curl_getinfo_string(curl, CURLINFO_EFFECTIVE_URL, &effective)
            throw Downloader.error(code, status: status, message: String(cString: errorBuffer), effectiveURL: effective.map { String(cString: $0) } ?? url, check: check)
        }
        var final = 0
        _ = signet_curl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &final)
        status = final
        if wanted != nil, status != 206 {
            throw refused("answered a range request with HTTP \(status)")
        }
    }

    /// Response headers of the final answer (a redirect's are reset by its status line).
    private func header(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("HTTP/") {
            contentRange = nil
            answerValidator = nil
            status = Int(trimmed.split(separator: " ").dropFirst().first ?? "") ?? 0
            return
        }
        guard let colon = trimmed.firstIndex(of: ":") else { return }
        let name = trimmed[..<colon].lowercased()
        let value = trimmed[trimmed.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        switch name {
        case "etag" where !value.hasPrefix("W/"): answerValidator = value   // weak ETags cannot be If-Range
        case "last-modified" where answerValidator == nil: answerValidator = value
        case "content-range": contentRange = Self.contentRange(value)
        default: break
        }
    }

    /// `bytes START-END/TOTAL`, all decimal, START ≤ END < TOTAL; nil for anything else.
    static func contentRange(_ value: String) -> (start: Int64, end: Int64, total: Int64)? {
        guard value.hasPrefix("bytes ") else { return nil }
        let parts = value.dropFirst(6).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let start = Int64(bounds[0]), let end = Int64(bounds[1]), let total = Int64(parts[1]),
              start >= 0, start <= end, end < total else { return nil }
        return (start, end, total)
    }

    /// Body bytes: checked against what was asked before `sink` sees them.
    private func body(_ chunk: UnsafeRawBufferPointer) -> Bool {
        do {
            if received == 0 {
                var current = 0
                _ = signet_curl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &current)
                if current != 206 {
                    // The whole file (ranges ignored, or If-Range failed: the file changed).
                    throw wanted == nil ? Unsupported(reason: "the server answered a range request with HTTP \(current)")
                        : refused("answered a range request with HTTP \(current): the package changed on the server during the update, or the server stopped honouring ranges")
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
