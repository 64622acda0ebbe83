#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
internal import CCurl
package import SystemPackage
import SignetCore

/// A sequence of bounded GETs under Signet's TLS policy on one libcurl handle (one connection
/// for a whole TUF refresh), each answer bounded by the length its caller allows: a server that
/// sends more is cut off at the limit (the "endless data" attack), and every request ends by one
/// deadline (`--max-time` from the fetcher's creation: slow retrieval). Failures are Signet's
/// own error kinds; no libcurl code leaves this layer.
package final class BoundedFetcher {
    /// What a request found: the bytes, or a 403/404 (the end of the root chain).
    package enum Answer {
        case found([UInt8])
        case absent(status: Int)
    }

    private let options: DownloadOptions
    private let cancelled: CancellationFlag?
    private var request: CurlRequest?
    /// Requests made and body bytes received, for reports.
    package private(set) var requests = 0
    package private(set) var bytesReceived: UInt64 = 0
    /// When every request of this fetcher must have ended (`--max-time` from its creation): a
    /// slow-retrieval attack cannot stretch a refresh further.
    private let deadline: UInt64

    package init(options: DownloadOptions, cancelled: CancellationFlag?) {
        self.options = options
        self.cancelled = cancelled
        deadline = Downloader.deadline(options)
    }

    private func handle(for url: String) throws -> CurlRequest {
        try Downloader.checkScheme(url, policy: options.tls)
        if let request {
            try request.retarget(url)
            return request
        }
        let made = try CurlRequest(url: url, options: options)
        request = made
        return made
    }

    /// GETs `url` into memory, at most `limit` bytes.
    package func get(_ url: String, limit: Int, what: String) throws -> Answer {
        var body: [UInt8] = []
        var tooLarge = false
        let outcome = try perform(url, what: what) { chunk in
            guard body.count + chunk.count <= limit else { tooLarge = true; return false }
            body.append(contentsOf: chunk)
            return true
        }
        if tooLarge {
            throw SignetError(
                .downloadTooLarge,
                "\(what) from '\(Download.redacted(url))' is larger than the \(limit) bytes allowed for it: refused (an endless-data attack, or a file that outgrew its bound)",
                path: Download.redacted(url))
        }
        if outcome.code == CURLE_HTTP_RETURNED_ERROR, outcome.status == 403 || outcome.status == 404 {
            return .absent(status: outcome.status)
        }
        try check(outcome)
        return .found(body)
    }

    /// POSTs `body` to `url` on a handle of its own; the answer's status and body (at most
    /// `limit` bytes), whatever the status: the caller judges it.
    package func post(_ url: String, body: [UInt8], contentType: String, limit: Int, what: String) throws -> (status: Int, body: [UInt8]) {
        try Downloader.checkScheme(url, policy: options.tls)
        let request = try CurlRequest(url: url, options: options)
        let left = Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds) / 1_000_000
        guard left > 0 else {
            throw SignetError(
                .network, "cannot send \(what) to '\(Download.redacted(url))' within --max-time \(Int(options.maxTime)) s", path: Download.redacted(url))
        }
        requests += 1
        var answer: [UInt8] = []
        var tooLarge = false
        request.onBody = { chunk in
            guard answer.count + chunk.count <= limit else { tooLarge = true; return false }
            answer.append(contentsOf: chunk)
            return true
        }
        let cancelled = self.cancelled
        request.onTick = { !(cancelled?.isSet ?? false) }
        let outcome = try request.post(body, headers: ["Content-Type: \(contentType)"], timeout: Int(clamping: left))
        if cancelled?.isSet ?? false { throw CancellationError() }
        bytesReceived &+= UInt64(answer.count)
        if tooLarge {
            throw SignetError(
                .downloadTooLarge, "the answer to \(what) from '\(Download.redacted(url))' is larger than \(limit) bytes", path: Download.redacted(url))
        }
        guard outcome.code == CURLE_OK else {
            throw Downloader.error(outcome.code, status: outcome.status, message: outcome.message, effectiveURL: outcome.effectiveURL, check: request.check)
        }
        return (outcome.status, answer)
    }

    /// GETs `url` into the open file `fd`, at most `limit` bytes; returns the bytes written.
    package func download(_ url: String, into fd: FileDescriptor, path: String, limit: Int64, what: String) throws -> Int64 {
        var written: Int64 = 0
        var failure: Error? = nil
        let outcome = try perform(url, what: what) { chunk in
            guard written + Int64(chunk.count) <= limit else {
                failure = SignetError(
                    .downloadTooLarge, "\(what) from '\(Download.redacted(url))' is larger than the \(limit) bytes it is stated to have: refused",
                    path: Download.redacted(url))
                return false
            }
            do {
                _ = try fd.writeAll(chunk)
            } catch {
                failure = SignetError.posix(error, "cannot write \(what)", path: path)
                return false
            }
            written += Int64(chunk.count)
            return true
        }
        if let failure { throw failure }
        try check(outcome)
        return written
    }

    private func perform(_ url: String, what: String, body: @escaping (UnsafeRawBufferPointer) -> Bool) throws -> CurlRequest.Outcome {
        let request = try handle(for: url)
        let left = Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds) / 1_000_000
        guard left > 0 else {
            throw SignetError(
                .network, "cannot fetch \(what) from '\(Download.redacted(url))' within --max-time \(Int(options.maxTime)) s (a slow or stalling server)",
                path: Download.redacted(url))
        }
        requests += 1
        let cancelled = self.cancelled
        // Signet asks for identity: a body sent encoded (gzip, br) is not the file, and is
        // refused by name before a byte of it is used (as every other download is).
        var response = ResponseHeaders()
        var refusal: SignetError? = nil
        var started = false
        request.onHeader = { response.take($0) }
        request.onBody = { [unowned self] chunk in
            if !started {
                started = true
                refusal = response.refusedEncoding(url: Download.redacted(url))
                if refusal != nil { return false }
            }
            bytesReceived &+= UInt64(chunk.count)
            return body(chunk)
        }
        request.onTick = { !(cancelled?.isSet ?? false) }
        let outcome = try request.perform(range: nil, timeout: Int(clamping: left))
        if cancelled?.isSet ?? false { throw CancellationError() }
        if let refusal { throw refusal }
        if outcome.code == CURLE_OPERATION_TIMEDOUT {
            throw SignetError(
                .network, "cannot fetch \(what) from '\(Download.redacted(url))' within --max-time \(Int(options.maxTime)) s (a slow or stalling server)",
                path: Download.redacted(url))
        }
        return outcome
    }

    private func check(_ outcome: CurlRequest.Outcome) throws {
        guard outcome.code != CURLE_OK else { return }
        throw Downloader.error(outcome.code, status: outcome.status, message: outcome.message, effectiveURL: outcome.effectiveURL, check: request!.check)
    }
}
