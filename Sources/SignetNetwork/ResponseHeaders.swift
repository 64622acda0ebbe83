import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// The response headers Signet acts on, of the final response (a redirect's or an interim
/// response's are dropped at the next status line): read once here for every transfer, full or
/// ranged.
///
/// - The **validator** that pins later requests to one file (`If-Range`), by RFC 9110 §8.8:
///   a strong `ETag` (never a weak `W/"…"` one), else a `Last-Modified` only when it is at least
///   ``lastModifiedMinimumAge`` (60 s) older than the response's `Date`. RFC 9110 §8.8.2.2 asks
///   for one second; both dates are whole seconds (one second apart may be 0.1 s), and Apache
///   httpd answers an `If-Range` date with the whole file for 60 s after a change, so the
///   stricter rule is the one every server agrees with. No validator: ranges cannot be pinned,
///   and the whole file is downloaded.
/// - `Content-Range`, strictly `bytes START-END/TOTAL`.
/// - `Content-Encoding`: Signet asks for `identity`; anything else means the bytes are not the
///   file (``refusedEncoding(url:)``).
package struct ResponseHeaders {
    private(set) var status = 0
    private var strongETag: String?
    private var lastModified: String?
    private var date: String?
    /// `bytes START-END/TOTAL` of the response, if it had a valid one.
    private(set) var contentRange: (start: Int64, end: Int64, total: Int64)?
    /// The response's `Content-Encoding` (lower case), unless absent or `identity`.
    private(set) var contentEncoding: String?
    /// The response's `Content-Type` (a multipart answer's boundary is in it).
    private(set) var contentType: String?

    package init() {}

    /// Takes one header line as libcurl hands it over (with its line end).
    package mutating func take(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("HTTP/") {
            self = ResponseHeaders()
            status = Int(trimmed.split(separator: " ").dropFirst().first ?? "") ?? 0
            return
        }
        guard let colon = trimmed.firstIndex(of: ":") else { return }
        let name = trimmed[..<colon].lowercased()
        let value = trimmed[trimmed.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        switch name {
        case "etag" where !value.hasPrefix("W/") && !value.isEmpty: strongETag = value
        case "last-modified": lastModified = value
        case "date": date = value
        case "content-range": contentRange = Self.contentRange(value)
        case "content-type": contentType = value
        case "content-encoding":
            // Several codings may be listed (and the header repeated): any but identity counts.
            let codings = value.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty && $0 != "identity" }
            if !codings.isEmpty { contentEncoding = ((contentEncoding.map { [$0] } ?? []) + codings).joined(separator: ", ") }
        default: break
        }
    }

    /// How much older than `Date` a `Last-Modified` must be to pin range requests (seconds).
    static let lastModifiedMinimumAge: Int64 = 60

    /// The strong validator: the ETag if strong, else a Last-Modified at least 60 s older
    /// than Date (RFC 9110 §8.8.2.2); nil when the response has neither.
    package var validator: String? {
        if let strongETag { return strongETag }
        guard let lastModified, let date, let modified = Self.httpDate(lastModified), let sent = Self.httpDate(date),
            case let (age, overflow) = sent.subtractingReportingOverflow(modified), !overflow,
            age >= Self.lastModifiedMinimumAge
        else { return nil }
        return lastModified
    }

    /// The refusal of a response whose body is encoded (`gzip`, `br`, …): Signet asked for
    /// `identity`, and encoded bytes are not the file.
    package func refusedEncoding(url: String) -> SignetError? {
        guard let contentEncoding else { return nil }
        return SignetError(
            .contentEncoding,
            "'\(url)' was sent with Content-Encoding: \(contentEncoding), although Signet asks for identity: the bytes are not the file, and nothing was written. Turn off compression for this path on the server (nginx: gzip off; Apache: SetEnv no-gzip 1 or RemoveOutputFilter; lighttpd: no deflate for it) or on the CDN",
            path: url)
    }

    /// `bytes START-END/TOTAL`, all decimal, START ≤ END < TOTAL; nil for anything else.
    static func contentRange(_ value: String) -> (start: Int64, end: Int64, total: Int64)? {
        guard value.hasPrefix("bytes ") else { return nil }
        let parts = value.dropFirst(6).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let bounds = parts[0].split(separator: "-", omittingEmptySubsequences: false)
        guard bounds.count == 2, let start = Int64(bounds[0]), let end = Int64(bounds[1]), let total = Int64(parts[1]),
            start >= 0, start <= end, end < total
        else { return nil }
        return (start, end, total)
    }

    /// Seconds since 1970 of an HTTP date in any of the three forms a recipient must accept
    /// (RFC 9110 §5.6.7: IMF-fixdate, RFC 850, asctime); nil for anything else.
    package static func httpDate(_ value: String) -> Int64? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEE, dd MMM yyyy HH:mm:ss 'GMT'", "EEEE, dd-MMM-yy HH:mm:ss 'GMT'", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: value) { return Int64(date.timeIntervalSince1970.rounded(.down)) }
        }
        return nil
    }
}
