import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import CCurl
internal import CSignetCurl
internal import SystemPackage
import SignetCore

/// Downloads over HTTPS with libcurl into a file Signet names, under Signet's TLS policy:
/// resumable (HTTP `Range` with `If-Range`), streamed (never held in memory), with time-outs
/// and bounded retries.
package enum Downloader {
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
    package static func checkScheme(_ url: String, policy: TLSPolicy) throws {
        let lower = url.lowercased()
        guard lower.hasPrefix("https://") || lower.hasPrefix("http://") else {
            throw SignetError(.usage, "'\(Download.redacted(url))' is not an https:// URL")
        }
        // A password in a URL is a secret on the command line (ps, shell history, logs).
        if let components = URLComponents(string: url), components.user != nil || components.password != nil {
            throw SignetError(
                .usage,
                "'\(Download.redacted(url))' has credentials in it (user@ or user:password@), where every process list and log would show them; Signet does not send them: serve the update without them, or with client certificates or a token in a proxy"
            )
        }
        if lower.hasPrefix("http://") && !policy.allowHTTP {
            throw SignetError(
                .usage, "'\(url)' is plain http://: the download could be changed by anyone on the way; use https://, or --allow-http for a test server")
        }
    }

    /// Downloads `url` into `partial`, continuing what an earlier attempt left there when the
    /// server still has the same file. `body` sees every byte of the file in order (the bytes
    /// already on disk first); `restart` is called before each attempt (whose `body` then sees
    /// the file from byte 0 again) and when the server sends the file anew.
    package static func download(
        _ url: String, into partial: String, options: DownloadOptions,
        cancelled: CancellationFlag? = nil, durable: Bool = true,
        body: ((UnsafeRawBufferPointer) throws -> Void)? = nil,
        restart: @escaping () throws -> Void = {}
    ) throws -> DownloadResult {
        try checkScheme(url, policy: options.tls)
        try requireCurl()
        let locked = try lockPartial(partial, options: options, cancelled: cancelled)
        let fd = locked.descriptor
        // Nothing arrived (a TLS refusal, an HTTP error, a cut before the first byte): nothing
        // to continue, so no empty partial is left behind. Removed while the lock is held.
        var complete = false
        defer {
            if !complete, let info = try? fd.status(), info.st_size == 0, PrivateFile.stillNamed(fd, partial) {
                _ = try? Paths.withParent(of: partial) { directory, name in unlinkat(directory.rawValue, name, 0) }
            }
        }
        let attempts = 1 + max(0, options.retries)
        var kept: UInt64? = nil
        var received: UInt64 = 0
        let deadline = Self.deadline(options)
        for attempt in 1...attempts {
            let transfer = Transfer(
                url: url, fd: fd, partial: partial, options: options, cancelled: cancelled, durable: durable,
                body: body, restart: restart, deadline: deadline)
            defer { received &+= transfer.bodyBytes }
            do {
                let result = try transfer.run()
                complete = true
                // The attribute is for partial downloads only (FORMAT.md §5): a complete file
                // does not carry it.
                _ = ExtendedAttributes.remove(Downloader.partialAttribute, on: fd)
                return DownloadResult(
                    path: partial, size: result.size, resumedFrom: kept ?? result.resumedFrom, effectiveURL: result.effectiveURL,
                    requests: attempt, bytesReceived: received &+ transfer.bodyBytes)
            } catch let failure as Transfer.Failure {
                kept = kept ?? failure.resumedFrom
                let left = Double(Int64(bitPattern: deadline &- DispatchTime.now().uptimeNanoseconds)) / 1e9
                let delay = min(30, max(0, options.retryDelay) * pow(2, Double(attempt - 1)))
                if failure.transient, attempt < attempts, left <= delay {
                    throw SignetError(
                        .network,
                        "cannot download '\(url)' within --max-time \(Int(options.maxTime)) s (\(failure.error.reason)); what arrived is kept in '\(partial)' and continues next time",
                        path: partial)
                }
                guard failure.transient, attempt < attempts else { throw failure.error }
                options.progress?(
                    DownloadProgress(
                        url: url, received: failure.received, expected: failure.expected, resumedFrom: kept ?? 0,
                        retry: .init(attempt: attempt + 1, attempts: attempts, delay: delay, reason: failure.error.reason)))
                try pause(delay, cancelled: cancelled, partial: partial)
            }
        }
        throw SignetError(.network, "cannot download '\(url)'") // not reached: the last attempt throws
    }

    /// When a transfer started now must end (uptime in ns): `--max-time` from now.
    package static func deadline(_ options: DownloadOptions) -> UInt64 {
        DispatchTime.now().uptimeNanoseconds &+ UInt64(max(1, min(options.maxTime, 30 * 86_400)) * 1e9)
    }

    /// Where a full download goes and what sees its bytes, as for
    /// ``download(_:into:options:cancelled:durable:body:restart:)``: what a range request the
    /// server answers with the whole file becomes (``TakenOver``).
    package struct FullDownload {
        let partial: String
        let options: DownloadOptions
        let cancelled: CancellationFlag?
        package let body: ((UnsafeRawBufferPointer) throws -> Void)?
        package let restart: () throws -> Void

        package init(
            partial: String, options: DownloadOptions, cancelled: CancellationFlag?,
            body: ((UnsafeRawBufferPointer) throws -> Void)?, restart: @escaping () throws -> Void
        ) {
            self.partial = partial
            self.options = options
            self.cancelled = cancelled
            self.body = body
            self.restart = restart
        }
    }

    /// A range request that the server answered with the whole file (HTTP 200), taken over as
    /// the full download: its body streams into the partial download from the first
    /// byte, instead of the request being aborted and the file asked for again.
    final class TakenOver {
        private let locked: OwnedDescriptor
        private let transfer: Transfer
        let partial: String

        init(_ full: FullDownload, request: CurlRequest, response: ResponseHeaders, deadline: UInt64) throws {
            locked = try lockPartial(full.partial, options: full.options, cancelled: full.cancelled)
            partial = full.partial
            transfer = Transfer(
                url: request.url, fd: locked.descriptor, partial: full.partial, options: full.options, cancelled: full.cancelled,
                durable: false, body: full.body, restart: full.restart, deadline: deadline)
            try transfer.takeOver(request, response: response)
        }

        /// The first chunk of the body (the ones after it go to the transfer directly).
        func receive(_ chunk: UnsafeRawBufferPointer) -> Bool { transfer.receive(chunk) }

        /// The request's outcome: the complete download, or ``Transfer/Failure``.
        func conclude(_ outcome: CurlRequest.Outcome) throws -> DownloadResult {
            let result = try transfer.conclude(outcome)
            _ = ExtendedAttributes.remove(Downloader.partialAttribute, on: locked.descriptor)
            return DownloadResult(
                path: partial, size: result.size, resumedFrom: 0, effectiveURL: result.effectiveURL,
                requests: 1, bytesReceived: transfer.bodyBytes)
        }
    }

    /// Opens the partial download as a private file (``/SignetCore/PrivateFile``) and locks it, waiting up
    /// to `options.wait` seconds for another process that downloads into it. After each wait
    /// the lock is checked to be on the file the path still names (the holder removes an empty
    /// partial when it gives up).
    static func lockPartial(_ partial: String, options: DownloadOptions, cancelled: CancellationFlag?) throws -> OwnedDescriptor {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, min(options.wait, 86_400)) * 1e9)
        while true {
            let file = try PrivateFile.open(partial, mode: 0o600, what: "download")
            if flock(file.descriptor.rawValue, LOCK_EX | LOCK_NB) == 0 {
                if PrivateFile.stillNamed(file.descriptor, partial) { return file }
                continue
            }
            let err = errno
            _ = consume file
            guard err == EWOULDBLOCK || err == EINTR else {
                throw SignetError.posix(err, "cannot lock the download", path: partial, call: "flock")
            }
            if cancelled?.isSet == true { throw CancellationError() }
            if TemporaryFiles.isInterrupted { throw SignetError(.interrupted, "interrupted while waiting for another download of '\(partial)'", path: partial) }
            if DispatchTime.now().uptimeNanoseconds >= deadline {
                throw SignetError(
                    .destinationBusy, "'\(partial)' is being downloaded by another process; try again when it has finished, or wait longer with --wait SECONDS",
                    path: partial)
            }
            usleep(20_000)
        }
    }

    /// The settings every request shares (FORMAT.md §5): the URL; https only (http with
    /// `allowHTTP`), also for redirects (at most ``DownloadOptions/maximumRedirects``); TLS 1.2
    /// or later with peer and host checked and Signet's policy (`check`) installed on each
    /// handshake's SSL_CTX; connect and low-speed time-outs; HTTP errors as errors; curl's
    /// message into `errorBuffer`. False when libcurl refused a setting.
    static func configure(
        _ curl: UnsafeMutableRawPointer, url: String, options: DownloadOptions, check: TLSCheck,
        errorBuffer: UnsafeMutablePointer<CChar>
    ) -> Bool {
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
        // The bytes of the file, never a compressed form of them: `Accept-Encoding: identity`,
        // and libcurl decodes nothing (a server that encodes anyway is refused by name:
        // ResponseHeaders.refusedEncoding).
        set(signet_curl_setopt_string(curl, CURLOPT_ACCEPT_ENCODING, "identity"))
        set(signet_curl_setopt_long(curl, CURLOPT_HTTP_CONTENT_DECODING, 0))
        set(signet_curl_setopt_pointer(curl, CURLOPT_ERRORBUFFER, errorBuffer))
        set(signet_curl_setopt_pointer(curl, CURLOPT_SSL_CTX_DATA, Unmanaged.passUnretained(check).toOpaque()))
        set(
            signet_curl_setopt_ssl_ctx_callback(curl) { _, context, argument in
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
    package static func error(_ code: CURLcode, status: Int, message: String, effectiveURL: String, check: TLSCheck) -> SignetError {
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
            // Which roots the chain was checked against: without --tls-ca, the system's store,
            // which a private CA is not in (the usual reason a first setup is refused).
            let roots =
                check.policy.roots.isEmpty
                ? "; the chain was checked against the system's CA store (no --tls-ca was given): for a server whose certificate a private CA issued, give that CA with --tls-ca FILE"
                : "; the chain was checked against the --tls-ca roots only"
            return SignetError(.tlsRefused, "TLS refused for '\(host)': \(reason)\(pins)\(roots)")
        }
        switch code {
        case CURLE_UNSUPPORTED_PROTOCOL:
            return SignetError(.tlsRefused, "'\(shown)' redirected to a URL that is not https:// (\(message)); refused")
        case CURLE_HTTP_RETURNED_ERROR:
            return SignetError(.network, "cannot download '\(shown)': the server answered HTTP \(status)")
        case CURLE_OUT_OF_MEMORY:
            // libcurl's answer to a response header over its 100 KiB limit, as to a failed allocation.
            return SignetError(
                .network,
                "cannot download '\(shown)': the server's response headers are larger than libcurl accepts (100 KiB), or memory ran out (\(message.isEmpty ? "out of memory" : message))"
            )
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

    /// What a partial download is part of (the `user.signet.download` attribute).
    struct PartialRecord: Codable {
        let url: String
        let validator: String?
    }

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
    package static func partialPath(besides target: String) -> String {
        let (directory, prefix) = TemporaryFiles.prefix(besides: target)
        return directory + "/" + prefix + "download"
    }
}
