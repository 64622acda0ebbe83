import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
internal import SystemPackage
import SignetCore

extension Downloader {
    /// One request: resume or start, stream, and map curl's outcome to Signet's errors.
    final class Transfer {
        struct Failure: Error {
            let error: SignetError
            let transient: Bool
            let resumedFrom: UInt64
            let received: UInt64
            let expected: UInt64?
        }

        let url: String
        /// The locked partial file (its owner is the caller, for as long as this runs).
        let fd: FileDescriptor
        let partial: String
        let options: DownloadOptions
        let cancelled: CancellationFlag?
        let durable: Bool
        let body: ((UnsafeRawBufferPointer) throws -> Void)?
        let restart: () throws -> Void
        /// When the whole download must end (uptime in ns, `--max-time`).
        let deadline: UInt64

        private var offset: UInt64 = 0
        private var resumedFrom: UInt64 = 0
        private var requestedFrom: UInt64 = 0
        private var started = false
        private var response = ResponseHeaders()
        private var validator: String? { response.validator }
        private var contentRangeStart: UInt64? { response.contentRange.map { UInt64($0.start) } }
        private var stop: (any Error)?
        /// The request whose body this attempt receives (while it runs).
        private var request: CurlRequest?
        /// Body bytes this attempt received (every byte the server sent, for reports).
        private(set) var bodyBytes: UInt64 = 0
        private var expected: UInt64?
        private var lastReport: UInt64 = 0 // uptime in ns of the last progress report

        init(
            url: String, fd: FileDescriptor, partial: String, options: DownloadOptions, cancelled: CancellationFlag?, durable: Bool,
            body: ((UnsafeRawBufferPointer) throws -> Void)?, restart: @escaping () throws -> Void, deadline: UInt64
        ) {
            self.deadline = deadline
            self.durable = durable
            self.url = url
            self.fd = fd
            self.partial = partial
            self.options = options
            self.cancelled = cancelled
            self.body = body
            self.restart = restart
        }

        private func fail(_ error: SignetError, transient: Bool = false) -> Failure {
            Failure(error: error, transient: transient, resumedFrom: resumedFrom, received: offset, expected: expected)
        }

        func run() throws -> (size: UInt64, resumedFrom: UInt64, effectiveURL: String) {
            // What is on disk, and whether it is a part of this URL's file.
            let size: UInt64
            do { size = UInt64(try fd.status().st_size) } catch {
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
                let record = try? JSONDecoder().decode(PartialRecord.self, from: Data(stored)), record.url == url
            {
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
                        try fd.forEachChunk(chunkSize: InputFile.chunkSize, body)
                    } catch let failure as SystemCallFailure {
                        throw fail(SignetError.posix(failure, "cannot read the download", path: partial))
                    }
                } else {
                    do { _ = try systemCall("lseek") { lseek(fd.rawValue, 0, SEEK_END) } } catch {
                        throw fail(SignetError.posix(error, "cannot read the download", path: partial))
                    }
                }
                offset = size
            }

            let request: CurlRequest
            do { request = try CurlRequest(url: url, options: options) } catch {
                throw fail(error as? SignetError ?? SignetError(.crypto, "libcurl could not start a transfer"))
            }
            // What is left of --max-time for this attempt.
            let left = Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds) / 1_000_000
            guard left > 0 else {
                throw fail(
                    SignetError(
                        .network,
                        "cannot download '\(url)' within --max-time \(Int(options.maxTime)) s; what arrived is kept in '\(partial)' and continues next time",
                        path: partial))
            }
            listen(to: request)
            let resuming = ifRange != nil && requestedFrom > 0
            let outcome: CurlRequest.Outcome
            do {
                outcome = try request.perform(
                    range: resuming ? "\(requestedFrom)-" : nil, headers: resuming ? ["If-Range: " + ifRange!] : [], timeout: Int(left))
            } catch {
                throw fail(error as? SignetError ?? SignetError(.crypto, "libcurl refused a request's settings"))
            }
            return try conclude(outcome)
        }

        /// Takes over `request`, a range request in flight that the server answered with the
        /// whole file (HTTP 200, headers `response`): its body, from the first byte on, becomes
        /// this download, instead of being thrown away and asked for again. The
        /// partial download starts over; call ``conclude(_:)`` with the request's outcome.
        func takeOver(_ request: CurlRequest, response: ResponseHeaders) throws {
            do { try restart() } catch {
                throw fail(error as? SignetError ?? SignetError(.crypto, "cannot restart the hash of the download", path: partial))
            }
            try truncate()
            self.response = response
            listen(to: request)
        }

        /// Routes `request`'s headers, body and progress ticks to this transfer.
        private func listen(to request: CurlRequest) {
            self.request = request
            request.onHeader = { [unowned self] in self.header($0) }
            request.onBody = { [unowned self] in self.receive($0) }
            request.onTick = { [unowned self] in self.tick() }
        }

        /// The request's outcome as this attempt's result or failure.
        func conclude(_ outcome: CurlRequest.Outcome) throws -> (size: UInt64, resumedFrom: UInt64, effectiveURL: String) {
            defer { request = nil }
            let code = outcome.code, status = outcome.status, effectiveURL = outcome.effectiveURL
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
            guard code == CURLE_OK else {
                let check = request?.check ?? TLSCheck(policy: options.tls)
                throw fail(
                    error(code, status: status, message: outcome.message, effectiveURL: effectiveURL, check: check),
                    transient: Self.isTransient(code, status: status))
            }
            guard status == 200 || status == 206 else {
                throw fail(SignetError(.network, "cannot download '\(effectiveURL)': the server answered HTTP \(status)"))
            }
            if !started { try begin(status: status) } // an empty body
            if durable {
                do { try fd.sync() } catch {
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
            // Encoded bytes are not the file: refused before any is written or hashed.
            if let refusal = response.refusedEncoding(url: Download.redacted(url)) { throw fail(refusal) }
            if requestedFrom > 0 {
                if status == 206, contentRangeStart == requestedFrom {
                    resumedFrom = requestedFrom
                } else {
                    // The server ignored the range, or the file changed (If-Range): start over.
                    try truncate()
                    try restart()
                }
            }
            let length = request?.contentLength ?? -1
            if length > 0 {
                guard offset + UInt64(length) <= options.maxSize else { throw tooLarge() }
                expected = offset + UInt64(length)
            }
            let record = PartialRecord(url: url, validator: validator)
            if let bytes = try? JSONEncoder().encode(record), validator != nil {
                _ = ExtendedAttributes.set(Downloader.partialAttribute, Array(bytes), on: fd) // without it the next run starts over
            } else {
                _ = ExtendedAttributes.remove(Downloader.partialAttribute, on: fd)
            }
        }

        private func truncate() throws {
            do {
                // Only a file with bytes in it: ext4 (auto_da_alloc) starts writeback of a file
                // truncated to zero when it is closed, which would write a download that unpack
                // reads once and removes, while unpack writes and fsyncs the installed files.
                if try fd.status().st_size > 0 {
                    _ = try systemCall("ftruncate") { ftruncate(fd.rawValue, 0) }
                }
                _ = try systemCall("lseek") { lseek(fd.rawValue, 0, SEEK_SET) }
            } catch {
                throw fail(SignetError.posix(error, "cannot start the download", path: partial))
            }
            offset = 0
            resumedFrom = 0
            _ = ExtendedAttributes.remove(Downloader.partialAttribute, on: fd)
        }

        private func tooLarge() -> SignetError {
            options.tooLarge(url, path: partial)
        }

        /// A chunk of the body: written to the partial download (and to `body`). False stops the
        /// transfer (the reason is kept for ``conclude(_:)``).
        func receive(_ chunk: UnsafeRawBufferPointer) -> Bool {
            do {
                if !started { try begin(status: request?.status ?? 0) }
                bodyBytes += UInt64(chunk.count)
                guard offset + UInt64(chunk.count) <= options.maxSize else { throw tooLarge() }
                try fd.write(all: chunk)
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

        /// Response headers: the validator, Content-Range and Content-Encoding of the final response.
        private func header(_ line: String) {
            response.take(line)
        }

        private func error(_ code: CURLcode, status: Int, message: String, effectiveURL: String, check: TLSCheck) -> SignetError {
            switch code {
            case CURLE_ABORTED_BY_CALLBACK:
                return SignetError(.interrupted, "interrupted; the partial download '\(partial)' is kept and continues next time", path: partial)
            case CURLE_OPERATION_TIMEDOUT where DispatchTime.now().uptimeNanoseconds >= deadline:
                return SignetError(
                    .network,
                    "cannot download '\(effectiveURL)' within --max-time \(Int(options.maxTime)) s; what arrived is kept in '\(partial)' and continues next time",
                    path: partial)
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
}
