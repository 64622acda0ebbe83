import Foundation
import SignetCore

/// A key's identity: the SHA-256 of its DER SubjectPublicKeyInfo (FORMAT.md §1).
///
/// Written as 64 lowercase hex characters (``hex``), shortened to 16 for display (``short``),
/// or as a curl/HPKP style pin `sha256//<base64>` (``pin``).
public struct KeyID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The 32 digest bytes.
    public let bytes: [UInt8]

    /// Creates an id from the 32 digest bytes; returns nil for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// Parses either 64 hex characters (either case) or `sha256//<base64>`.
    public init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("sha256//") {
            guard let data = Data(base64Encoded: String(trimmed.dropFirst("sha256//".count))),
                data.count == 32
            else { return nil }
            self.bytes = Array(data)
            return
        }
        guard trimmed.utf8.count == 64, let bytes = [UInt8](hex: trimmed) else { return nil }
        self.bytes = bytes
    }

    /// The id of a key given as DER SubjectPublicKeyInfo.
    package init(subjectPublicKeyInfo der: [UInt8]) throws {
        self.bytes = try Digest.compute(der, algorithm: .sha256).bytes
    }

    /// 64 lowercase hex characters.
    public var hex: String { bytes.hexString }
    /// The first 16 hex characters, for display.
    public var short: String { String(hex.prefix(16)) }
    /// `sha256//<base64 of the digest>`, as curl's `--pinnedpubkey` and HPKP write it.
    public var pin: String { "sha256//" + Data(bytes).base64EncodedString() }
    /// The full hex form.
    public var description: String { hex }

    public static func < (lhs: KeyID, rhs: KeyID) -> Bool { lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }
}

extension Array where Element == UInt8 {
    /// Lowercase hex.
    package var hexString: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses an even-length hex string (either case); nil on any other character.
    package init?(hex: String) {
        let utf8 = Array(hex.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var bytes = [UInt8]()
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self = bytes
    }
}
