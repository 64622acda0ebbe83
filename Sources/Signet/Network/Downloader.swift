import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
internal import CSignetShims
internal import SystemPackage

/// How a download behaves on the network (FORMAT.md §5).
public struct DownloadOptions: Sendable {
    /// Which servers are trusted.
    public var tls = TLSPolicy()
    /// Largest body accepted, in bytes (`--max-download-size`); more is refused (exit 4).
    public var maxSize: UInt64 = 16 << 30
    /// Seconds to wait for a connection (`--connect-timeout`).
    public var connectTimeout: Int = 30
    /// A transfer slower than 1 KiB/s for this many seconds is given up (`--low-speed-time`).
    public var lowSpeedTime: Int = 60
    /// Seconds a whole download may take, every attempt and pause included (`--max-time`,
    /// default one day): a trickle just above the low-speed limit does not run for months.
    /// What arrived is kept and continued by the next call.
    public var maxTime: Double = 86_400
    /// Further attempts after a transient failure (connection reset or refused, time-out, a
    /// body cut short, HTTP 5xx); never after HTTP 4xx or a TLS refusal (`--retries`).
    public var retries: Int = 3
    /// Seconds before the first retry; doubled for each next one, at most 30 (`--retry-delay`).
    public var retryDelay: Double = 1
    /// Seconds to wait for another process that is downloading into the same partial file
    /// (`--wait`), before giving up with `.destinationBusy` (exit 5).
    public var wait: Double = 10
    /// Read packages with HTTP range requests where the server answers them (`inspect` and
    /// `unpack` of a URL: only what is needed is fetched, nothing of the package is stored);
    /// false downloads the whole package first (`--full-download`). Single files (`fetch`)
    /// are always downloaded whole.
    public var ranges: Bool = true
    /// Redirects followed, each to https:// only and each under the same TLS policy.
    public static let maximumRedirects = 5
    /// Called on the downloading thread as bytes arrive (at most ten times a second, and once
    /// when the body is complete) and before each retry. Keep it short: the transfer waits.
    public var progress: (@Sendable (DownloadProgress) -> Void)? = nil

    /// The defaults.
    public init() {}
}

/// Where a download is, for a progress display (``DownloadOptions/progress``).
public struct DownloadProgress: Sendable {
    /// The URL asked for.
    public let url: String
    /// Bytes of the file on disk now, those kept from an earlier attempt included.
    public let received: UInt64
    /// The file's whole size, when the server announced it.
    public let expected: UInt64?
    /// Bytes kept from an earlier, interrupted download (not downloaded by this attempt).
    public let resumedFrom: UInt64
    /// Set when an attempt failed and another follows after a pause.
    public let retry: Retry?

    /// A failed attempt that will be tried again.
    public struct Retry: Sendable {
        /// The attempt that comes next (2 for the first retry).
        public let attempt: Int
        /// Attempts in all (1 + `DownloadOptions.retries`).
        public let attempts: Int
        /// Seconds before it starts.
        public let delay: Double
        /// Why the last attempt failed.
        public let reason: String
    }
}

/// What a download did.
public struct DownloadResult: Sendable {
    /// The complete file (the partial download's path).
    public let path: String
    /// Its size in bytes.
    public let size: UInt64
    /// Bytes that were already on disk from an earlier, interrupted download and were kept.
    public let resumedFrom: UInt64
    /// The URL the body came from after redirects.
    public let effectiveURL: String
}

/// Downloads over HTTPS with libcurl into a file Signet names, under Signet's TLS policy:
/// resumable (HTTP `Range` with `If-Range`), streamed (never held in memory), with time-outs
/// and bounded retries.
enum Downloader {
    /// The attribute on a partial download that says what it is a part of: the URL and the
    /// validator (a strong ETag or Last-Modified) a resumed request sends as `If-Range`.
    static let partialAttribute = "user.signet.download"

    /// Loads libcurl (once per process; it is not linked, so that commands that download
    /// nothing do not pay for loading it) or says why it cannot be used.
    static func requireCurl() throws {
        guard signet_curl_load() == 1 else {
            let reason = signet_curl_load_error().map { String(cString: $0) } ?? "unknown"
            throw SignetError(.io, "downloads need libcurl, which could not be loaded (\(reason)); install it: apt-get install libcurl4")
        }
    }

    /// Refuses a URL the policy does not allow: only https://, or http:// with `allowHTTP`.
    static func checkScheme(_ url: String, policy: TLSPolicy) throws {
        let lower = url.lowercased()
        guard lower.hasPrefix("https://") || lower.hasPrefix("http://") else {
            throw SignetError(.usage, "'\(Download.redacted(url))' is not an https:// URL")
        }
        // A password in a URL is a secret on the command line (ps, shell history, logs).
        if let components = URLComponents(string: url), components.user != nil || components.password != nil {
            throw SignetError(.usage, "'\(Download.redacted(url))' has credentials in it (user@ or user:password@), where every process list and log would show them; Signet does not send them: serve the update without them, or with client certificates or a token in a proxy")
        }
        if lower.hasPrefix("http://") && !policy.allowHTTP {
            throw SignetError(.usage, "'\(url)' is plain http://: the download could be changed by anyone on the way; use https://, or --allow-http for a test server")
        }
    }

    /// Downloads `url` into `partial`, continuing what an earlier attempt left there when the
    /// server still has the same file. `body` sees every byte of the file in order (the bytes
    /// already on disk first); `restart` is called before each attempt (whose `body` then sees
    /// the file from byte 0 again) and when the server sends the file anew.
    static func download(_ url: String, into partial: String, options: DownloadOptions,
                         cancelled: CancellationFlag? = nil, durable: Bool = true,
                         body: ((UnsafeRawBufferPointer) throws -> Void)? = nil,
                         restart: @escaping () throws -> Void = {}) throws -> DownloadResult {
        try checkScheme(url, policy: options.tls)
        try requireCurl()
        let fd = try lockPartial(partial, options: options, cancelled: cancelled)
        defer { close(fd) }
        // Nothing arrived (a TLS refusal, an HTTP error, a cut before the first byte): nothing
        // to continue, so no empty partial is left behind. Removed while the lock is held.
        var complete = false
        defer {
            var info = stat()
            if !complete, fstat(fd, &info) == 0, info.st_size == 0, PrivateFile.stillNamed(fd, partial) {
                _ = try? Paths.withParent(of: partial) { directory, name in unlinkat(directory, name, 0) }
            }
        }
        let attempts = 1 + max(0, options.retries)
        var kept: UInt64? = nil
        let deadline = DispatchTime.now().uptimeNanoseconds &+ UInt64(max(1, min(options.maxTime, 30 * 86_400)) * 1e9)
        for attempt in 1...attempts {
            let transfer = Transfer(url: url, fd: fd, partial: partial, options: options, cancelled: cancelled, durable: durable,
                                    body: body, restart: restart, deadline: deadline)
            do {
                let result = try transfer.run()
                complete = true
                // The attribute is for partial downloads only (FORMAT.md §5): a complete file
                // does not carry it.
                _ = ExtendedAttributes.remove(Downloader.partialAttribute, on: fd)
                return DownloadResult(path: partial, size: result.size, resumedFrom: kept ?? result.resumedFrom, effectiveURL: result.effectiveURL)
            } catch let failure as Transfer.Failure {
                kept = kept ?? failure.resumedFrom
                let left = Double(Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds)) / 1e9
                let delay = min(30, max(0, options.retryDelay) * pow(2, Double(attempt - 1)))
                if failure.transient, attempt < attempts, left <= delay {
                    throw SignetError(.network, "cannot download '\(url)' within --max-time \(Int(options.maxTime)) s (\(failure.error.reason)); what arrived is kept in '\(partial)' and continues next time", path: partial)
                }
                guard failure.transient, attempt < attempts else { throw failure.error }
                options.progress?(DownloadProgress(url: url, received: failure.received, expected: failure.expected, resumedFrom: kept ?? 0,
                                                   retry: .init(attempt: attempt + 1, attempts: attempts, delay: delay, reason: failure.error.reason)))
                try pause(delay, cancelled: cancelled, partial: partial)
            }
        }
        throw SignetError(.network, "cannot download '\(url)'")   // not reached: the last attempt throws
    }

    /// Opens the partial download as a private file (``PrivateFile``) and locks it, waiting up
    /// to `options.wait` seconds for another process that downloads into it. After each wait
    /// the lock is checked to be on the file the path still names (the holder removes an empty
    /// partial when it gives up).
    private static func lockPartial(_ partial: String, options: DownloadOptions, cancelled: CancellationFlag?) throws -> Int32 {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, min(options.wait, 86_400)) * 1e9)
        while true {
            let fd = try PrivateFile.open(partial, mode: 0o600, what: "download").descriptor
            if flock(fd, LOCK_EX | LOCK_NB) == 0 {
                if PrivateFile.stillNamed(fd, partial) { return fd }
                close(fd)
                continue
            }
            let err = errno
            close(fd)
            guard err == EWOULDBLOCK || err == EINTR else {
                throw SignetError.posix(err, "cannot lock the download", path: partial, call: "flock")
            }
            if cancelled?.isSet == true { throw CancellationError() }
            if TemporaryFiles.isInterrupted { throw SignetError(.interrupted, "interrupted while waiting for another download of '\(partial)'", path: partial) }
            if DispatchTime.now().uptimeNanoseconds >= deadline {
                throw SignetError(.destinationBusy, "'\(partial)' is being downloaded by another process; try again when it has finished, or wait longer with --wait SECONDS", path: partial)
            }
            usleep(20_000)
        }
    }

    /// The settings every request shares (FORMAT.md §5): the URL; https only (http with
    /// `allowHTTP`), also for redirects (at most ``DownloadOptions/maximumRedirects``); TLS 1.2
    /// or later with peer and host checked and Signet's policy (`check`) installed on each
    /// handshake's SSL_CTX; connect and low-speed time-outs; HTTP errors as errors; curl's
    /// message into `errorBuffer`. False when libcurl refused a setting.
    static func configure(_ curl: UnsafeMutableRawPointer, url: String, options: DownloadOptions, check: TLSCheck,
                          errorBuffer: UnsafeMutablePointer<CChar>) -> Bool {
        let protocols = options.tls.allowHTTP ? "http,https" : "https"
        var ok = true
        func set(_ result: CURLcode) { ok = ok && result == CURLE_OK }
        set(signet_curl_setopt_string(curl, CURLOPT_URL, url))
        set(signet_curl_setopt_string(curl, CURLOPT_PROTOCOLS_STR, protocols))
        set(signet_curl_setopt_string(curl, CURLOPT_REDIR_PROTOCOLS_STR, protocols))
        set(signet_curl_setopt_long(curl, CURLOPT_FOLLOWLOCATION, 1))
        set(signet_curl_setopt_long(curl, CURLOPT_MAXREDIRS, Int(DownloadOptions.maximumRedirects)))
        set(signet_curl_setopt_long(curl, CURLOPT_FAILONERROR, 1))
        set(signet_curl_setopt_long(curl, CURLOPT_NOSIGNAL, 1))
        set(signet_curl_setopt_long(curl, CURLOPT_SSLVERSION, Int(CURL_SSLVERSION_TLSv1_2)))
        set(signet_curl_setopt_long(curl, CURLOPT_SSL_VERIFYPEER, 1))
        set(signet_curl_setopt_long(curl, CURLOPT_SSL_VERIFYHOST, 2))
        set(signet_curl_setopt_long(curl, CURLOPT_CONNECTTIMEOUT, max(1, options.connectTimeout)))
        set(signet_curl_setopt_long(curl, CURLOPT_LOW_SPEED_LIMIT, 1024))
        set(signet_curl_setopt_long(curl, CURLOPT_LOW_SPEED_TIME, max(1, options.lowSpeedTime)))
        // Larger reads than the 16 KiB default: fewer callbacks and writes (curl(1) uses 100 KiB).
        set(signet_curl_setopt_long(curl, CURLOPT_BUFFERSIZE, 512 * 1024))
        set(signet_curl_setopt_string(curl, CURLOPT_USERAGENT, "signet/\(SignetVersion.signet)"))
        set(signet_curl_setopt_pointer(curl, CURLOPT_ERRORBUFFER, errorBuffer))
        set(signet_curl_setopt_pointer(curl, CURLOPT_SSL_CTX_DATA, Unmanaged.passUnretained(check).toOpaque()))
        set(signet_curl_setopt_ssl_ctx_callback(curl) { _, context, argument in
            guard let context, let argument else { return CURLE_SSL_CERTPROBLEM }
            let check = Unmanaged<TLSCheck>.fromOpaque(argument).takeUnretainedValue()
            return check.install(on: OpaquePointer(context)) ? CURLE_OK : CURLE_SSL_CERTPROBLEM
        })
        return ok
    }

    /// curl's outcome as Signet's error: a TLS refusal (exit 3) naming the host, the check and
    /// the pins the server presented; a redirect away from https; an HTTP status; a header over
    /// libcurl's limit; else a network failure (exit 5).
    /// The error names the URL as its `path` (the JSON error's `file`), without query or fragment.
    static func error(_ code: CURLcode, status: Int, message: String, effectiveURL: String, check: TLSCheck) -> SignetError {
        var error = curlError(code, status: status, message: message, effectiveURL: effectiveURL, check: check)
        if error.path == nil { error.path = Download.recordedSource(effectiveURL) }
        return error
    }

    private static func curlError(_ code: CURLcode, status: Int, message: String, effectiveURL: String, check: TLSCheck) -> SignetError {
        let shown = effectiveURL
        let host = URLComponents(string: effectiveURL)?.host ?? shown
        let pins = check.shownDescription
        // A failed handshake is a TLS refusal when our policy or the chain refused it (a
        // connect error with nothing of ours to say is a network failure, below).
        let refusedByPolicy = code == CURLE_SSL_CONNECT_ERROR && (check.refusal != nil || !check.presentedPins.isEmpty)
        if code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE || refusedByPolicy {
            let reason = check.refusal ?? (message.isEmpty ? "the certificate chain did not verify" : message)
            return SignetError(.tlsRefused, "TLS refused for '\(host)': \(reason)\(pins)")
        }
        switch code {
        case CURLE_UNSUPPORTED_PROTOCOL:
            return SignetError(.tlsRefused, "'\(shown)' redirected to a URL that is not https:// (\(message)); refused")
        case CURLE_HTTP_RETURNED_ERROR:
            return SignetError(.network, "cannot download '\(shown)': the server answered HTTP \(status)")
        case CURLE_OUT_OF_MEMORY:
            // libcurl's answer to a response header over its 100 KiB limit, as to a failed allocation.
            return SignetError(.network, "cannot download '\(shown)': the server's response headers are larger than libcurl accepts (100 KiB), or memory ran out (\(message.isEmpty ? "out of memory" : message))")
        default:
            let text = message.isEmpty ? String(cString: signet_curl_easy_strerror(code)) : message
            return SignetError(.network, "cannot download '\(shown)': \(text)")
        }
    }

    /// Waits before a retry, in short steps, so that an interruption or a cancelled task does
    /// not wait for the whole pause.
    private static func pause(_ seconds: Double, cancelled: CancellationFlag?, partial: String) throws {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if cancelled?.isSet == true { throw CancellationError() }
            if TemporaryFiles.isInterrupted {
                throw SignetError(.interrupted, "interrupted; the partial download '\(partial)' is kept and continues next time", path: partial)
            }
            usleep(useconds_t(min(0.05, max(0, end.timeIntervalSinceNow)) * 1_000_000))
        }
    }

    /// One request: resume or start, stream, and map curl's outcome to Signet's errors.
    private final class Transfer {
        struct Failure: Error {
            let error: SignetError
            let transient: Bool
            let resumedFrom: UInt64
            let received: UInt64
            let expected: UInt64?
        }

        let url: String
        let fd: Int32
        let partial: String
        let options: DownloadOptions
        let cancelled: CancellationFlag?
        let durable: Bool
        let body: ((UnsafeRawBufferPointer) throws -> Void)?
        let restart: () throws -> Void
        let check: TLSCheck
        /// When the whole download must end (uptime in ns, `--max-time`).
        let deadline: UInt64

        private var offset: UInt64 = 0
        private var resumedFrom: UInt64 = 0
        private var requestedFrom: UInt64 = 0
        private var started = false
        private var validator: String?
        private var contentRangeStart: UInt64?
        private var stop: (any Error)?
        private var handle: UnsafeMutableRawPointer?
        private var expected: UInt64?
        private var lastReport: UInt64 = 0   // uptime in ns of the last progress report

        init(url: String, fd: Int32, partial: String, options: DownloadOptions, cancelled: CancellationFlag?, durable: Bool,
             body: ((UnsafeRawBufferPointer) throws -> Void)?, restart: @escaping () throws -> Void, deadline: UInt64) {
            self.deadline = deadline
            self.durable = durable
            self.url = url
            self.fd = fd
            self.partial = partial
            self.options = options
            self.cancelled = cancelled
            self.body = body
            self.restart = restart
            self.check = TLSCheck(policy: options.tls)
        }

        private func fail(_ error: SignetError, transient: Bool = false) -> Failure {
            Failure(error: error, transient: transient, resumedFrom: resumedFrom, received: offset, expected: expected)
        }

        func run() throws -> (size: UInt64, resumedFrom: UInt64, effectiveURL: String) {
            // What is on disk, and whether it is a part of this URL's file.
            let size: UInt64
            do { size = UInt64(try FileDescriptor(fd).status().st_size) } catch {
                throw fail(SignetError.posix(error, "cannot read the download", path: partial))
            }
            // Every attempt hashes from byte 0: the bytes kept from an earlier attempt go through
            // `body` again below, so nothing of a failed attempt stays in the hash (a retry that
            // starts over must not hash the first attempt's bytes, nor one that continues hash
            // the kept bytes twice).
            do { try restart() } catch {
                throw fail(error as? SignetError ?? SignetError(.crypto, "cannot restart the hash of the download", path: partial))
            }
            var ifRange: String? = nil
            if size > 0, case .success(let stored?) = ExtendedAttributes.get(Downloader.partialAttribute, on: fd),
               let record = try? JSONDecoder().decode(PartialRecord.self, from: Data(stored)), record.url == url {
                ifRange = record.validator
            }
            if ifRange == nil {
                try truncate()
            } else {
                requestedFrom = size
                // The bytes kept go through `body` first, as if they had just arrived (read
                // again only when someone hashes them).
                if let body {
                    do {
                        try FileDescriptor(fd).forEachChunk(chunkSize: InputFile.chunkSize, body)
                    } catch let failure as SystemCallFailure {
                        throw fail(SignetError.posix(failure, "cannot read the download", path: partial))
                    }
                } else {
                    do { _ = try systemCall("lseek") { lseek(fd, 0, SEEK_END) } } catch {
                        throw fail(SignetError.posix(error, "cannot read the download", path: partial))
                    }
                }
                offset = size
            }

            // curl writes its message here during perform: memory that outlives the
            // setopt call and the handle (freed after curl_easy_cleanup).
            let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
            errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
            defer { errorBuffer.deallocate() }
            var headers: UnsafeMutablePointer<curl_slist>? = nil
            defer { signet_curl_slist_free_all(headers) }
            guard let curl = signet_curl_easy_init() else { throw fail(SignetError(.crypto, "libcurl could not start a transfer")) }
            handle = curl
            defer { signet_curl_easy_cleanup(curl) }
            let me = Unmanaged.passUnretained(self).toOpaque()
            var ok = Downloader.configure(curl, url: url, options: options, check: check, errorBuffer: errorBuffer)
            func set(_ result: CURLcode) { ok = ok && result == CURLE_OK }
            // What is left of --max-time for this attempt.
            let left = Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds) / 1_000_000
            guard left > 0 else {
                throw fail(SignetError(.network, "cannot download '\(url)' within --max-time \(Int(options.maxTime)) s; what arrived is kept in '\(partial)' and continues next time", path: partial))
            }
            set(signet_curl_setopt_long(curl, CURLOPT_TIMEOUT_MS, Int(left)))
            set(signet_curl_setopt_pointer(curl, CURLOPT_HEADERDATA, me))
            set(signet_curl_setopt_data_callback(curl, CURLOPT_HEADERFUNCTION) { data, size, count, argument in
                guard let data, let argument else { return 0 }
                let line = String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self)
                Unmanaged<Transfer>.fromOpaque(argument).takeUnretainedValue().header(line)
                return size * count
            })
            set(signet_curl_setopt_pointer(curl, CURLOPT_WRITEDATA, me))
            set(signet_curl_setopt_data_callback(curl, CURLOPT_WRITEFUNCTION) { data, size, count, argument in
                guard let data, let argument else { return 0 }
                let chunk = UnsafeRawBufferPointer(start: data, count: size * count)
                return Unmanaged<Transfer>.fromOpaque(argument).takeUnretainedValue().write(chunk) ? size * count : 0
            })
            set(signet_curl_setopt_long(curl, CURLOPT_NOPROGRESS, 0))
            set(signet_curl_setopt_pointer(curl, CURLOPT_XFERINFODATA, me))
            set(signet_curl_setopt_progress_callback(curl) { argument, _, _, _, _ in
                guard let argument else { return 1 }
                return Unmanaged<Transfer>.fromOpaque(argument).takeUnretainedValue().tick() ? 0 : 1
            })
            if let ifRange, requestedFrom > 0 {
                set(signet_curl_setopt_string(curl, CURLOPT_RANGE, "\(requestedFrom)-"))
                headers = signet_curl_slist_append(headers, "If-Range: " + ifRange)
                set(signet_curl_setopt_pointer(curl, CURLOPT_HTTPHEADER, headers))
            }
            guard ok else { throw fail(SignetError(.crypto, "libcurl refused Signet's transfer settings (libcurl \(SignetVersion.curl))")) }

            let code = signet_curl_easy_perform(curl)
            let message = String(cString: errorBuffer)
            var status = 0
            _ = signet_curl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &status)
            var effective: UnsafeMutablePointer<CChar>? = nil
            _ = signet_curl_getinfo_string(curl, CURLINFO_EFFECTIVE_URL, &effective)
            let effectiveURL = effective.map { String(cString: $0) } ?? url
            if let stop {
                if stop is CancellationError { throw stop }
                throw fail(stop as? SignetError ?? SignetError.posix(stop, "cannot write the download", path: partial))
            }
            if code == CURLE_ABORTED_BY_CALLBACK, cancelled?.isSet == true { throw CancellationError() }
            if code == CURLE_HTTP_RETURNED_ERROR, status == 416, requestedFrom > 0 {
                // The part on disk does not fit the file the server has now: start over.
                try truncate()
                throw fail(SignetError(.network, "cannot continue the download of '\(url)': the server has another file now"), transient: true)
            }
            guard code == CURLE_OK else { throw fail(error(code, status: status, message: message, effectiveURL: effectiveURL), transient: Self.isTransient(code, status: status)) }
            guard status == 200 || status == 206 else {
                throw fail(SignetError(.network, "cannot download '\(effectiveURL)': the server answered HTTP \(status)"))
            }
            if !started { try begin(status: status) }   // an empty body
            if durable {
                do { try FileDescriptor(fd).sync() } catch {
                    throw fail(SignetError.posix(error, "cannot flush the download", path: partial))
                }
            }
            report(force: true)
            return (offset, resumedFrom, effectiveURL)
        }

        /// The first body bytes: decide between continuing and starting over, and record what
        /// a later attempt needs to continue.
        private func begin(status: Int) throws {
            started = true
            if requestedFrom > 0 {
                if status == 206, contentRangeStart == requestedFrom {
                    resumedFrom = requestedFrom
                } else {
                    // The server ignored the range, or the file changed (If-Range): start over.
                    try truncate()
                    try restart()
                }
            }
            var length: curl_off_t = -1
            if let handle { _ = signet_curl_getinfo_off(handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) }
            if length > 0 {
                guard offset + UInt64(length) <= options.maxSize else { throw tooLarge() }
                expected = offset + UInt64(length)
            }
            let record = PartialRecord(url: url, validator: validator)
            if let bytes = try? JSONEncoder().encode(record), validator != nil {
                _ = ExtendedAttributes.set(Downloader.partialAttribute, Array(bytes), on: fd)   // without it the next run starts over
            } else {
                _ = ExtendedAttributes.remove(Downloader.partialAttribute, on: fd)
            }
        }

        private func truncate() throws {
            do {
                // Only a file with bytes in it: ext4 (auto_da_alloc) starts writeback of a file
                // truncated to zero when it is closed, which would write a download that unpack
                // reads once and removes, while unpack writes and fsyncs the installed files.
                if try FileDescriptor(fd).status().st_size > 0 {
                    _ = try systemCall("ftruncate") { ftruncate(fd, 0) }
                }
                _ = try systemCall("lseek") { lseek(fd, 0, SEEK_SET) }
            } catch {
                throw fail(SignetError.posix(error, "cannot start the download", path: partial))
            }
            offset = 0
            resumedFrom = 0
            _ = ExtendedAttributes.remove(Downloader.partialAttribute, on: fd)
        }

        private func tooLarge() -> SignetError {
            SignetError(.downloadTooLarge, "'\(url)' is larger than \(options.maxSize) bytes (--max-download-size); refusing to download more", path: partial)
        }

        private func write(_ chunk: UnsafeRawBufferPointer) -> Bool {
            do {
                if !started {
                    var status = 0
                    if let handle { _ = signet_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status) }
                    try begin(status: status)
                }
                guard offset + UInt64(chunk.count) <= options.maxSize else { throw tooLarge() }
                try FileDescriptor(fd).write(all: chunk)
                try body?(chunk)
                offset += UInt64(chunk.count)
                return true
            } catch let failure as Failure {
                stop = failure.error
            } catch {
                stop = error
            }
            return false
        }

        /// curl's progress callback: false stops the transfer (interrupted or cancelled).
        fileprivate func tick() -> Bool {
            if TemporaryFiles.isInterrupted { return false }
            if cancelled?.isSet == true {
                stop = CancellationError()
                return false
            }
            report(force: false)
            return true
        }

        /// Calls the progress handler at most ten times a second, and when `force`d.
        private func report(force: Bool) {
            guard let progress = options.progress else { return }
            let now = DispatchTime.now().uptimeNanoseconds
            guard force || now &- lastReport >= 100_000_000 else { return }
            lastReport = now
            progress(DownloadProgress(url: url, received: offset, expected: expected ?? (force ? offset : nil), resumedFrom: resumedFrom, retry: nil))
        }

        /// Response headers: the validator and Content-Range of the final response.
        private func header(_ line: String) {
            let trimmed = line.trimmingCharacters(in: .whitespacesAndNewlines)
            if trimmed.hasPrefix("HTTP/") {
                validator = nil
                contentRangeStart = nil
                return
            }
            guard let colon = trimmed.firstIndex(of: ":") else { return }
            let name = trimmed[..<colon].lowercased()
            let value = trimmed[trimmed.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            switch name {
            case "etag" where !value.hasPrefix("W/"): validator = value         // weak ETags cannot be If-Range
            case "last-modified" where validator == nil: validator = value
            case "content-range":
                // "bytes START-END/TOTAL"
                let numbers = value.drop { !$0.isNumber }
                contentRangeStart = numbers.prefix { $0.isNumber }.isEmpty ? nil : UInt64(numbers.prefix { $0.isNumber })
            default: break
            }
        }

        private func error(_ code: CURLcode, status: Int, message: String, effectiveURL: String) -> SignetError {
            switch code {
            case CURLE_ABORTED_BY_CALLBACK:
                return SignetError(.interrupted, "interrupted; the partial download '\(partial)' is kept and continues next time", path: partial)
            case CURLE_OPERATION_TIMEDOUT where DispatchTime.now().uptimeNanoseconds >= deadline:
                return SignetError(.network, "cannot download '\(effectiveURL)' within --max-time \(Int(options.maxTime)) s; what arrived is kept in '\(partial)' and continues next time", path: partial)
            default:
                return Downloader.error(code, status: status, message: message, effectiveURL: effectiveURL, check: check)
            }
        }

        static func isTransient(_ code: CURLcode, status: Int) -> Bool {
            switch code {
            case CURLE_COULDNT_CONNECT, CURLE_OPERATION_TIMEDOUT, CURLE_RECV_ERROR, CURLE_SEND_ERROR,
                 CURLE_PARTIAL_FILE, CURLE_GOT_NOTHING:
                return true
            case CURLE_HTTP_RETURNED_ERROR:
                return status >= 500
            default:
                return false
            }
        }
    }

    /// What a partial download is part of (the `user.signet.download` attribute).
    struct PartialRecord: Codable {
        let url: String
        let validator: String?
    }
}

extension Installer {
    /// Installs the package at `url` (https://) at `destination`, verified exactly as
    /// ``install(_:to:policy:options:)``.
    ///
    /// Where the server answers range requests (and `download.ranges` is on), the package is
    /// read in place (FORMAT.md §5, "Updates over range requests"): its directory and manifest
    /// first, which must verify before any resource is asked for; every file whose path, size
    /// and SHA-256 equal a file of the installed tree is copied from it and hashed as it is
    /// copied; only the others are fetched, streamed into the staging directory. Nothing of the
    /// package is stored. What an interrupted run staged is taken over by the next one, and a
    /// package replaced on the server mid-way is read again from the start, once
    /// (`.packageChanged` the second time). ``InstallReport/transfer`` says what moved; the
    /// progress handler counts the planned bytes.
    ///
    /// Otherwise the package is downloaded into `.DIR.signet-download` beside `destination`
    /// (the same filesystem; a download cut short continues from there on the next call) and
    /// installed from it; a complete download is removed whether the package installed or was
    /// refused. Each installed file's `user.signet.meta` records `url` as its `source` (without
    /// query or fragment).
    public static func install(downloading url: String, to destination: String, policy: TrustPolicy,
                               options: InstallOptions = InstallOptions(),
                               download: DownloadOptions = DownloadOptions()) throws -> InstallReport {
        try install(downloading: url, to: destination, policy: policy, options: options, download: download, cancelled: nil)
    }

    /// `install(downloading:to:policy:options:download:)` on a thread of its own; cancelling
    /// the task stops the transfer (a full download's partial file is kept for the next call)
    /// and throws `CancellationError`, with the destination as it was. Once everything is
    /// fetched and verified, the installation itself runs to its end, so that DIR is never
    /// left between the old tree and the new one.
    public static func install(downloading url: String, to destination: String, policy: TrustPolicy,
                               options: InstallOptions = InstallOptions(),
                               download: DownloadOptions = DownloadOptions()) async throws -> InstallReport {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async {
                try install(downloading: url, to: destination, policy: policy, options: options, download: download, cancelled: cancelled)
            }
        } onCancel: {
            cancelled.set()
        }
    }

    static func install(downloading url: String, to destination: String, policy: TrustPolicy,
                        options: InstallOptions, download: DownloadOptions, cancelled: CancellationFlag?) throws -> InstallReport {
        try Downloader.checkScheme(url, policy: download.tls)
        let destination = try normalizedDestination(destination)
        try Paths.createDirectories(AtomicFile.parentDirectory(of: destination), mode: 0o755, what: "directory")
        // DIR's lock first, for the download too: a second update of DIR waits (--wait) and is
        // told which process holds it, as for a local package.
        let lock = try DestinationLock(destination, wait: options.wait)
        defer { lock.release() }
        var options = options
        options.source = Download.recordedSource(url)
        if download.ranges, !options.bare {
            // Read in place with range requests: only what the installed tree lacks is fetched.
            do {
                return try installRanged(url, to: destination, policy: policy, options: options, download: download, cancelled: cancelled)
            } catch is RangeClient.Unsupported {
                // The server does not answer ranges: the whole package, as below.
            }
        }
        let partial = Downloader.partialPath(besides: destination)
        var download = download
        download.wait = min(download.wait, options.wait)
        // Not fsynced: the download is read at once and removed. After a power cut, what is on
        // disk of it may be incomplete; it is then continued or downloaded anew, and verified
        // before anything is installed, so the worst case is a second download.
        // A package a channel index names is hashed as it arrives: its size and SHA-256 must be
        // the index's before it is opened.
        var hashing = try options.expectedPackage.map { _ in try Digest.Hasher(.sha256) }
        let binds = hashing != nil
        let result = try Downloader.download(url, into: partial, options: download, cancelled: cancelled, durable: false,
                                             body: binds ? { hashing?.update($0) } : nil,
                                             restart: { if binds { hashing = try Digest.Hasher(.sha256) } })
        defer { unlink(partial) }
        if let expected = options.expectedPackage, let hashing {
            let digest = try hashing.finalize()
            guard result.size == expected.size, digest.matches(hex: expected.sha256) else {
                throw SignetError(.indexMismatch, "the package at '\(Download.redacted(url))' is \(result.size) bytes with SHA-256 \(digest.hex); the channel index binds \(expected.size) bytes with SHA-256 \(expected.sha256). Nothing was installed", path: url)
            }
        }
        var report: InstallReport
        do {
            report = try install(partial, to: destination, policy: policy, options: options, holding: lock)
        } catch var error as SignetError {
            // The user gave a URL: a refusal names it, not the download kept beside DIR.
            let shown = Download.redacted(url)
            if error.path == partial { error.path = shown }
            error.reason = error.reason.replacingOccurrences(of: partial, with: shown)
            throw error
        }
        let files = report.manifest?.files ?? []
        let bytes = files.reduce(0) { $0 &+ $1.size }
        report.transfer = TransferReport(mode: .full, bytesDownloaded: result.size - result.resumedFrom, requests: 1, filesFetched: report.files.count,
                                         filesReused: 0, filesResumed: 0, bytesFetched: bytes, bytesTotal: bytes, packageSize: result.size)
        return report
    }

    /// ``install(downloading:to:policy:options:download:)`` over range requests (DIR locked).
    /// Throws ``RangeClient/Unsupported`` before anything is fetched but the end of the package
    /// when the server does not answer ranges.
    private static func installRanged(_ url: String, to destination: String, policy: TrustPolicy, options: InstallOptions,
                                      download: DownloadOptions, cancelled: CancellationFlag?) throws -> InstallReport {
        // What earlier runs left staged (killed, or their link dropped) is taken for its files;
        // removed at the end, unless this run's link drops too.
        let leftovers = StagedLeftovers(destination: destination)
        var adopted = false
        do {
            // A package replaced on the server while it is read is refused by the server's
            // answer (If-Range); the update then starts once more from the start, on the new one.
            for attempt in 1...2 {
                let input = try RangedInput(url: url, options: download, cancelled: cancelled)
                if !adopted {
                    leftovers.adopt()
                    adopted = true
                }
                let update = RangedUpdate(input: input, destination: destination, leftovers: leftovers)
                do {
                    let report = try installRanged(input, update: update, to: destination, policy: policy, options: options, download: download)
                    leftovers.remove()
                    return report
                } catch let failure as SignetError where failure.code == .packageChanged && attempt == 1 {
                    continue
                }
            }
            throw SignetError(.packageChanged, "not reached")
        } catch let failure as SignetError where failure.code == .network {
            leftovers.keep()
            throw failure
        } catch {
            leftovers.remove()
            throw error
        }
    }

    private static func installRanged(_ input: RangedInput, update: RangedUpdate, to destination: String, policy: TrustPolicy,
                                      options: InstallOptions, download: DownloadOptions) throws -> InstallReport {
        let url = input.url
        let stale = TemporaryFiles.removeStale(besides: destination)
        let state = try DestinationState.inspect(destination, force: options.replacesForeign(destination))
        let reader = try ZipReader(input: input, maximumEntries: options.limits.maximumEntries, localHeaders: .deferred)
        if let progress = download.progress {
            // The bytes of the planned requests: what the progress line counts to.
            let started = DispatchTime.now().uptimeNanoseconds
            var last: UInt64 = 0
            var received: UInt64 = 0
            // Weakly: the input holds this closure, and the update holds the input.
            input.received = { [weak update] count in
                received &+= UInt64(count)
                let now = DispatchTime.now().uptimeNanoseconds
                guard now &- last >= 100_000_000 || now &- started < 1 else { return }
                last = now
                progress(DownloadProgress(url: url, received: received, expected: update?.plannedBytes.map { max($0, received) }, resumedFrom: 0, retry: nil))
            }
        }
        defer { input.received = nil }
        return try install(reader: reader, package: input.path, to: destination, state: state, stale: stale, policy: policy,
                           options: options, ranged: update)
    }
}

extension Downloader {
    /// Whether a failed request is worth another attempt (connection refused or reset,
    /// time-out, a body cut short, HTTP 5xx).
    static func isTransient(_ code: CURLcode, status: Int) -> Bool { Transfer.isTransient(code, status: status) }

    /// Waits `seconds` before another attempt, in short steps, stopping for an interruption or
    /// a cancelled task.
    static func pauseBeforeRetry(_ seconds: Double, cancelled: CancellationFlag?) throws {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if cancelled?.isSet == true { throw CancellationError() }
            if TemporaryFiles.isInterrupted { throw SignetError(.interrupted, "interrupted; nothing was installed") }
            usleep(useconds_t(min(0.05, max(0, end.timeIntervalSinceNow)) * 1_000_000))
        }
    }

    /// Where a download for `target` is kept until it is complete: `.NAME.signet-download`
    /// beside it (FORMAT.md §5).
    static func partialPath(besides target: String) -> String {
        let (directory, prefix) = TemporaryFiles.prefix(besides: target)
        return directory + "/" + prefix + "download"
    }
}

/// Downloads for applications: one file, resumable, under a ``TLSPolicy``.
public enum Download {
    /// Whether `argument` names an http(s) URL rather than a file.
    public static func isURL(_ argument: String) -> Bool {
        let lower = argument.lowercased()
        return lower.hasPrefix("https://") || lower.hasPrefix("http://")
    }

    /// `url` without a password, for messages.
    static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "***"
        return components.string ?? "(a URL with credentials)"
    }

    /// What `user.signet.meta` records as a file's `source`: the URL without query and
    /// fragment (which may hold an access token); nil for URLs longer than 2 KiB.
    static func recordedSource(_ url: String) -> String? {
        guard var components = URLComponents(string: url) else { return nil }
        components.query = nil
        components.fragment = nil
        components.user = nil
        components.password = nil
        guard let text = components.string, text.utf8.count <= 2048 else { return nil }
        return text
    }

    /// Downloads `url` to `path`: into `.NAME.signet-download` beside it (continued if an
    /// earlier call was cut short), fsynced, then renamed to `path`. When `signature` and
    /// `policy` are given, the body is hashed as it arrives and `path` appears only if the
    /// signature verifies; the file then carries it as `user.signet.sig`, as unpack does, and
    /// `user.signet.meta` records `url` as its `source`.
    public static func file(_ url: String, to path: String, options: DownloadOptions = DownloadOptions(),
                            signature: [UInt8]? = nil, algorithm: SignatureAlgorithm = .default,
                            policy: TrustPolicy? = nil, replace: Bool = true) throws -> DownloadResult {
        try file(url, to: path, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace, cancelled: nil)
    }

    /// ``file(_:to:options:signature:algorithm:policy:)`` on a thread of its own (not Swift
    /// concurrency's shared pool, which a blocking transfer would hold); cancelling the task
    /// stops the transfer, keeps what arrived for the next call, and throws `CancellationError`.
    /// Progress goes to ``DownloadOptions/progress``.
    public static func file(_ url: String, to path: String, options: DownloadOptions = DownloadOptions(),
                            signature: [UInt8]? = nil, algorithm: SignatureAlgorithm = .default,
                            policy: TrustPolicy? = nil, replace: Bool = true) async throws -> DownloadResult {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async {
                try file(url, to: path, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace, cancelled: cancelled)
            }
        } onCancel: {
            cancelled.set()
        }
    }

    static func file(_ url: String, to path: String, options: DownloadOptions, signature: [UInt8]?,
                     algorithm: SignatureAlgorithm, policy: TrustPolicy?, replace: Bool = true, cancelled: CancellationFlag?) throws -> DownloadResult {
        guard (signature == nil) == (policy == nil) else {
            throw SignetError(.usage, "a signature needs a trust policy to verify it with, and a trust policy a signature")
        }
        // Before a byte is fetched: an existing output is replaced only when asked.
        if !replace { try AtomicFile.refuseExisting(path, what: "the download's output") }
        let partial = Downloader.partialPath(besides: path)
        let state = HasherBox(try Digest.Hasher(algorithm.digest))
        // Hashed as it arrives only when there is a signature to check.
        let result = try Downloader.download(url, into: partial, options: options, cancelled: cancelled,
                                             body: signature == nil ? nil : { state.hasher.update($0) },
                                             restart: { state.hasher = try Digest.Hasher(algorithm.digest) })
        if let signature, let policy {
            let digest = try state.hasher.finalize()
            let verdict = Verifier(policy: policy).verify(signature: signature, digest: digest, algorithm: algorithm)
            guard let key = verdict.signer else {
                unlink(partial)
                var error = verdict.error(path: path) ?? SignetError(.badSignature, verdict.message, path: path)
                error.reason = "'\(url)' does not verify: \(verdict.message); nothing was written to '\(path)'"
                throw error
            }
            let file = try InputFile.open(partial, what: "download", followSymlinks: false)
            let fd = file.descriptor.rawValue
            switch ExtendedAttributes.set(ExtendedAttributes.signature, signature, on: fd) {
            case .success:
                let meta = try Installer.metadata(path: String(path.split(separator: "/").last ?? ""), sha256: digest.hex, signer: key, manifest: nil,
                                                  algorithm: algorithm, source: recordedSource(url))
                _ = ExtendedAttributes.set(ExtendedAttributes.metadata, meta, on: fd)
            case .failure(let failure) where failure.isUnsupported: break
            case .failure(let failure): throw failure.error("set", attribute: ExtendedAttributes.signature, path: path)
            }
        }
        do {
            if replace {
                _ = try TemporaryFiles.guardedCall("rename") { rename(partial, path) }.get()
            } else {
                try TemporaryFiles.guarded { try AtomicFile.renameNoReplace(partial, path, what: "the download's output") }
            }
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot write", path: path)
        }
        AtomicFile.syncDirectory(AtomicFile.parentDirectory(of: path))
        return DownloadResult(path: path, size: result.size, resumedFrom: result.resumedFrom, effectiveURL: result.effectiveURL)
    }

    /// Downloads `url` into a new private folder (`mkdtemp`, mode 0700) under `$TMPDIR` and
    /// returns the file's path. For reading a package without installing it (`inspect URL`);
    /// the caller removes it with ``removeTemporaryCopy(_:)``. Nothing is shared with other
    /// users or other runs: a download cut short is not continued.
    public static func temporaryCopy(of url: String, options: DownloadOptions = DownloadOptions()) throws -> String {
        try temporaryCopy(of: url, options: options, cancelled: nil)
    }

    /// ``temporaryCopy(of:options:)`` on a thread of its own; cancelling the task stops it.
    public static func temporaryCopy(of url: String, options: DownloadOptions = DownloadOptions()) async throws -> String {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async { try temporaryCopy(of: url, options: options, cancelled: cancelled) }
        } onCancel: {
            cancelled.set()
        }
    }

    /// Removes a file `temporaryCopy(of:options:)` returned, and its private folder.
    public static func removeTemporaryCopy(_ path: String) {
        unlink(path)
        let folder = AtomicFile.parentDirectory(of: path)
        if folder.split(separator: "/").last?.hasPrefix("signet-download-") == true { rmdir(folder) }
    }

    static func temporaryCopy(of url: String, options: DownloadOptions, cancelled: CancellationFlag?) throws -> String {
        try Downloader.checkScheme(url, policy: options.tls)
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((base + "/signet-download-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw SignetError.posix(errno, "cannot create a private folder for the download in", path: base, call: "mkdtemp")
        }
        let folder = String(cString: made)
        // Removed with its contents if the process is interrupted before the caller removes it.
        _ = TemporaryFiles.register(folder, tree: true)
        let path = folder + "/package"
        do {
            _ = try Downloader.download(url, into: path, options: options, cancelled: cancelled, durable: false)   // read at once, then removed
        } catch {
            removeTemporaryCopy(path)
            throw error
        }
        return path
    }

    private final class HasherBox: @unchecked Sendable {
        // Used on the downloading thread only.
        var hasher: Digest.Hasher
        init(_ hasher: Digest.Hasher) { self.hasher = hasher }
    }
}
