import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetNetwork

/// Issue 36 points 4 and 5: validators per RFC 9110 §8.8 and the Content-Encoding refusal,
/// decided in one place for full and ranged transfers.
@Suite("Response headers: strong validators, Content-Range, Content-Encoding")
struct ResponseHeadersTests {
    static func headers(_ lines: [String]) -> ResponseHeaders {
        var headers = ResponseHeaders()
        for line in ["HTTP/1.1 206 Partial Content\r\n"] + lines.map({ $0 + "\r\n" }) { headers.take(line) }
        return headers
    }

    @Test("HTTP dates in the three forms a recipient must accept; anything else is no date")
    func dates() {
        #expect(ResponseHeaders.httpDate("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(ResponseHeaders.httpDate("Sunday, 06-Nov-94 08:49:37 GMT") == 784_111_777)
        #expect(ResponseHeaders.httpDate("Sun Nov  6 08:49:37 1994") == 784_111_777)
        #expect(ResponseHeaders.httpDate("yesterday") == nil)
        #expect(ResponseHeaders.httpDate("") == nil)
    }

    @Test(
        "Last-Modified is a validator only when at least 60 s older than Date (Apache's If-Range rule; RFC 9110's one second is not enough with whole-second dates); a strong ETag always; a weak one never"
    )
    func validators() {
        let date = "Date: Thu, 26 Nov 2026 10:00:00 GMT"
        // Apache's first second after a change: Last-Modified equal to Date, a weak ETag.
        #expect(Self.headers([date, "Last-Modified: Thu, 26 Nov 2026 10:00:00 GMT", "ETag: W/\"a-b\""]).validator == nil)
        // One second by the dates may be a tenth of a second in fact, and Apache answers a date
        // If-Range with the whole file for 60 s after a change: 60 s it is.
        #expect(Self.headers([date, "Last-Modified: Thu, 26 Nov 2026 09:59:59 GMT"]).validator == nil)
        #expect(Self.headers([date, "Last-Modified: Thu, 26 Nov 2026 09:59:01 GMT"]).validator == nil)
        #expect(Self.headers([date, "Last-Modified: Thu, 26 Nov 2026 09:59:00 GMT"]).validator == "Thu, 26 Nov 2026 09:59:00 GMT")
        // Later than Date (a clock ahead), or no Date at all: no validator.
        #expect(Self.headers([date, "Last-Modified: Thu, 26 Nov 2026 10:00:05 GMT"]).validator == nil)
        #expect(Self.headers(["Last-Modified: Thu, 26 Nov 2026 09:00:00 GMT"]).validator == nil)
        #expect(Self.headers([date, "Last-Modified: Thu, 26 Nov 2026 10:00:00 GMT", "ETag: \"abc\""]).validator == "\"abc\"")
        // A redirect's or an interim answer's headers do not count for the final one.
        var headers = Self.headers(["ETag: \"old\""])
        headers.take("HTTP/1.1 200 OK\r\n")
        #expect(headers.validator == nil && headers.status == 200)
    }

    @Test("Content-Range strictly; Content-Encoding other than identity is refused by name")
    func rangeAndEncoding() throws {
        #expect(Self.headers(["Content-Range: bytes 10-19/100"]).contentRange?.start == 10)
        for bad in ["bytes 10-9/100", "bytes 0-100/100", "bytes -1-3/10", "items 0-1/2", "bytes 0-1/*"] {
            #expect(Self.headers(["Content-Range: " + bad]).contentRange == nil, "\(bad)")
        }
        #expect(Self.headers(["Content-Encoding: identity"]).refusedEncoding(url: "https://x/p.zip") == nil)
        #expect(Self.headers([]).refusedEncoding(url: "https://x/p.zip") == nil)
        let refusal = try #require(Self.headers(["Content-Encoding: gzip"]).refusedEncoding(url: "https://x/p.zip"))
        #expect(refusal.code == .contentEncoding && refusal.code.exitStatus.rawValue == 5)
        #expect(refusal.reason.contains("gzip") && refusal.reason.contains("https://x/p.zip"), "\(refusal.reason)")
        #expect(Self.headers(["Content-Encoding: identity, br"]).refusedEncoding(url: "u")?.reason.contains("br") == true)
    }
}
