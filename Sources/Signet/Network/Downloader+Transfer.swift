import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CCurl
internal import CSignetShims
internal import SystemPackage

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
        let check: TLSCheck
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
        private var handle: UnsafeMutableRawPointer?
        private var expected: UInt64?
        private var lastReport: UInt64 = 0   // uptime in ns of the last progress report

        init(url: String, fd: FileDescriptor, partial: String, options: DownloadOptions, cancelled: CancellationFlag?, durable: Bool,
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
}
