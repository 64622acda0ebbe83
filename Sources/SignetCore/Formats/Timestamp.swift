import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A UTC time to the second, written as RFC 3339 with a `Z` (`2026-11-22T10:00:00Z`), as FORMAT.md
/// requires for `created` and `expires`.
public struct Timestamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Seconds since 1970-01-01T00:00:00Z.
    public let secondsSinceEpoch: Int64

    /// Creates a timestamp from UNIX seconds.
    public init(secondsSinceEpoch: Int64) {
        self.secondsSinceEpoch = secondsSinceEpoch
    }

    /// The current time, truncated to the second.
    public static var now: Timestamp { Timestamp(secondsSinceEpoch: Int64(time(nil))) }

    /// "this device's clock reads 2026-11-28 10:55:02 CET": said beside every refusal a wrong
    /// clock causes (a certificate not yet valid, metadata expired), in local time, so that a
    /// clock two years off is seen for what it is.
    package static var clockReading: String {
        var seconds = time(nil)
        var parts = tm()
        localtime_r(&seconds, &parts)
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S %Z", &parts)
        return
            "this device's clock reads \(String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)): if that is wrong, set the clock (NTP)"
    }

    /// Parses `YYYY-MM-DDTHH:MM:SSZ` exactly (UTC, no fraction, no offset); nil otherwise.
    public init?(rfc3339 text: String) {
        let bytes = Array(text.utf8)
        guard bytes.count == 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            bytes[19] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int32? {
            var value: Int32 = 0
            for byte in bytes[range] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int32(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = month - 1
        parts.tm_mday = day
        parts.tm_hour = hour
        parts.tm_min = minute
        parts.tm_sec = second
        let seconds = timegm(&parts)
        // timegm normalises out-of-range days (Feb 30 -> Mar 2): refuse those.
        guard parts.tm_mday == day, parts.tm_mon == month - 1 else { return nil }
        self.secondsSinceEpoch = Int64(seconds)
    }

    /// RFC 3339 UTC with `Z`.
    public var rfc3339: String {
        var seconds = time_t(secondsSinceEpoch)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        // Widened: tm_year + 1900 overflows Int32 for the largest years gmtime accepts.
        let year = String(Int(parts.tm_year) + 1900)
        return
            "\(String(repeating: "0", count: max(0, 4 - year.count)) + year)-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))Z"
    }

    public var description: String { rfc3339 }

    /// The range RFC 3339 times with four-digit years can express (0000-01-01 to 9999-12-31):
    /// a time outside it cannot be written into a manifest that a verifier will read back.
    public static let representable: ClosedRange<Int64> = -62_167_219_200...253_402_300_799

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.secondsSinceEpoch < rhs.secondsSinceEpoch }
}

// MARK: Foundation's Date

extension Timestamp {
    /// The second `date` falls in (a fraction is dropped, toward the past).
    public init(_ date: Date) {
        self.init(secondsSinceEpoch: Int64(date.timeIntervalSince1970.rounded(.down)))
    }

    /// The same instant as a `Date`.
    public var date: Date { Date(timeIntervalSince1970: TimeInterval(secondsSinceEpoch)) }
}
