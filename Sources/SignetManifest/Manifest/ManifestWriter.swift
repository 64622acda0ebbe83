import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SignetCore
import SignetCrypto

/// Appends JSON with the layout and string escapes of Foundation's sorted-key output without
/// escaped slashes: the manifest (pretty-printed) and `user.signet.meta` (compact).
struct ManifestWriter {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    mutating func raw(_ text: String) { bytes.append(contentsOf: text.utf8) }

    mutating func indent(_ level: Int) { bytes.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * level)) }

    /// `"key" : value` on its own line, followed by a comma unless it is the last.
    mutating func field(_ key: String, indent level: Int, last: Bool = false, _ value: (inout ManifestWriter) -> Void) {
        indent(level)
        string(key)
        raw(" : ")
        value(&self)
        raw(last ? "\n" : ",\n")
    }

    mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): raw("\\\"")
            case UInt8(ascii: "\\"): raw("\\\\")
            case 0x08: raw("\\b")
            case 0x0C: raw("\\f")
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                raw("\\u00")
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0x0F)])
            default: bytes.append(byte) // UTF-8 passes through, as Foundation writes it
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
