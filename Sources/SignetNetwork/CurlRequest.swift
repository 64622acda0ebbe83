#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import CCurl
internal import CSignetCurl
import SignetCore

/// One libcurl easy handle with Signet's settings (``Downloader/configure(_:url:options:check:errorBuffer:)``)
/// and the one wiring of its callbacks: response header lines, body chunks and progress ticks go
/// to the handlers its user sets. Full downloads (``Downloader/Transfer``) and range requests
/// (``RangeClient``) both go through it; a handle performs any number of requests, reusing its
/// connection. A user may hand a request in flight to another (``Downloader/Transfer/takeOver(_:response:)``:
/// a range request answered with the whole file becomes the full download).
package final class CurlRequest {
    /// What one request gave: libcurl's code, the final HTTP status, libcurl's message, the URL
    /// after redirects.
    package struct Outcome {
        package let code: CURLcode
        package let status: Int
        package let message: String
        package let effectiveURL: String
    }

    private(set) var url: String
    /// The TLS policy run inside each handshake; its refusal and the pins seen name the failure.
    package let check: TLSCheck
    private let curl: UnsafeMutableRawPointer
    /// curl writes its message here during perform: memory that outlives the handle.
    private let errorBuffer: UnsafeMutablePointer<CChar>
    private var headerList: UnsafeMutablePointer<curl_slist>?

    /// Each response header line (also a redirect's, whose status line starts a new answer).
    package var onHeader: (String) -> Void = { _ in }
    /// Each body chunk; false stops the transfer (the handler records why).
    package var onBody: (UnsafeRawBufferPointer) -> Bool = { _ in false }
    /// Called several times a second during a transfer; false stops it.
    package var onTick: () -> Bool = { true }

    package init(url: String, options: DownloadOptions) throws {
        try Downloader.requireCurl()
        guard let curl = signet_curl_easy_init() else { throw SignetError(.crypto, "libcurl could not start a transfer") }
        self.curl = curl
        self.url = url
        check = TLSCheck(policy: options.tls)
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let me = Unmanaged.passUnretained(self).toOpaque()
        var ok = Downloader.configure(curl, url: url, options: options, check: check, errorBuffer: errorBuffer)
        func set(_ result: CURLcode) { ok = ok && result == CURLE_OK }
        set(signet_curl_setopt_pointer(curl, CURLOPT_HEADERDATA, me))
        set(
            signet_curl_setopt_data_callback(curl, CURLOPT_HEADERFUNCTION) { data, size, count, argument in
                guard let data, let argument else { return 0 }
                let line = String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self)
                Unmanaged<CurlRequest>.fromOpaque(argument).takeUnretainedValue().onHeader(line)
                return size * count
            })
        set(signet_curl_setopt_pointer(curl, CURLOPT_WRITEDATA, me))
        set(
            signet_curl_setopt_data_callback(curl, CURLOPT_WRITEFUNCTION) { data, size, count, argument in
                guard let data, let argument else { return 0 }
                let chunk = UnsafeRawBufferPointer(start: data, count: size * count)
                return Unmanaged<CurlRequest>.fromOpaque(argument).takeUnretainedValue().onBody(chunk) ? size * count : 0
            })
        set(signet_curl_setopt_long(curl, CURLOPT_NOPROGRESS, 0))
        set(signet_curl_setopt_pointer(curl, CURLOPT_XFERINFODATA, me))
        set(
            signet_curl_setopt_progress_callback(curl) { argument, _, _, _, _ in
                guard let argument else { return 1 }
                return Unmanaged<CurlRequest>.fromOpaque(argument).takeUnretainedValue().onTick() ? 0 : 1
            })
        guard ok else {
            // Every property is set: deinit runs and frees the handle and the buffer.
            throw SignetError(.crypto, "libcurl refused Signet's transfer settings (libcurl \(SignetVersion.curl))")
        }
    }

    deinit {
        signet_curl_easy_cleanup(curl)
        signet_curl_slist_free_all(headerList)
        errorBuffer.deallocate()
    }

    /// Points the handle at another URL (on the same server, its connection is reused).
    package func retarget(_ url: String) throws {
        guard signet_curl_setopt_string(curl, CURLOPT_URL, url) == CURLE_OK else {
            throw SignetError(.crypto, "libcurl refused the URL '\(Download.redacted(url))'")
        }
        self.url = url
    }

    /// The status of the answer being received (during a body: the final answer's).
    var status: Int {
        var value = 0
        _ = signet_curl_getinfo_long(curl, CURLINFO_RESPONSE_CODE, &value)
        return value
    }

    /// The answer's Content-Length, if it has one.
    var contentLength: Int64? {
        var length: curl_off_t = -1
        _ = signet_curl_getinfo_off(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length)
        return length >= 0 ? Int64(length) : nil
    }

    /// One request: `range` (`"START-END"`, `"START-"` or `"-SUFFIX"`; nil for the whole file),
    /// extra request `headers`, at most `timeout` milliseconds. The handlers run during it; they
    /// are reset afterwards (nothing of the caller's outlives the request).
    package func perform(range: String?, headers: [String] = [], timeout: Int) throws -> Outcome {
        try perform(range: range, headers: headers, post: nil, timeout: timeout)
    }

    /// A POST of `body` (libcurl copies it), its answer whatever its status: the caller reads a
    /// 4xx answer's body (a witness says why it refused). The handle stays a POST handle.
    package func post(_ body: [UInt8], headers: [String], timeout: Int) throws -> Outcome {
        try perform(range: nil, headers: headers, post: body, timeout: timeout)
    }

    private func perform(range: String?, headers: [String], post: [UInt8]?, timeout: Int) throws -> Outcome {
        defer {
            onHeader = { _ in }
            onBody = { _ in false }
            onTick = { true }
        }
        signet_curl_slist_free_all(headerList)
        headerList = nil
        for header in headers { headerList = signet_curl_slist_append(headerList, header) }
        var ok = signet_curl_setopt_pointer(curl, CURLOPT_HTTPHEADER, headerList) == CURLE_OK
        ok = ok && signet_curl_setopt_long(curl, CURLOPT_TIMEOUT_MS, max(1, timeout)) == CURLE_OK
        if let range {
            ok = ok && signet_curl_setopt_string(curl, CURLOPT_RANGE, range) == CURLE_OK
        } else {
            ok = ok && signet_curl_setopt_pointer(curl, CURLOPT_RANGE, nil) == CURLE_OK
        }
        if let post {
            ok = ok && signet_curl_setopt_long(curl, CURLOPT_FAILONERROR, 0) == CURLE_OK
            ok = ok && signet_curl_setopt_off(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(post.count)) == CURLE_OK
            ok =
                ok
                && post.withUnsafeBytes {
                    signet_curl_setopt_pointer(
                        curl, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
                } == CURLE_OK
        }
        guard ok else { throw SignetError(.crypto, "libcurl refused a request's settings (libcurl \(SignetVersion.curl))") }
        errorBuffer.pointee = 0
        let code = signet_curl_easy_perform(curl)
        var effective: UnsafeMutablePointer<CChar>? = nil
        _ = signet_curl_getinfo_string(curl, CURLINFO_EFFECTIVE_URL, &effective)
        return Outcome(code: code, status: status, message: String(cString: errorBuffer), effectiveURL: effective.map { String(cString: $0) } ?? url)
    }
}
