import SignetCore
/// A JSON value of TUF metadata, kept whole: every field, also those Signet does not know, so
/// that the canonical form a signature covers can be made again (TUF specification §4.2 and
/// securesystemslib's `encode_canonical`). Parsed by ``/SignetCore/StrictJSON`` (no duplicate keys, no
/// fractions or exponents: canonical JSON has no floating-point numbers).
package indirect enum TUFJSON: Equatable, Sendable {
    case null
    case bool(Bool)
    /// An integer as written (RFC 8259 grammar, no leading zeros).
    case number(String)
    case string(String)
    case array([TUFJSON])
    /// Members in document order (keys are unique: the parser refuses duplicates).
    case object([(String, TUFJSON)])

    package static func == (lhs: TUFJSON, rhs: TUFJSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.number(let x), .number(let y)): return x == y
        case (.string(let x), .string(let y)): return x.unicodeScalars.elementsEqual(y.unicodeScalars)
        case (.array(let x), .array(let y)): return x == y
        case (.object(let x), .object(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { $0.0.unicodeScalars.elementsEqual($1.0.unicodeScalars) && $0.1 == $1.1 }
        default: return false
        }
    }

    /// Deepest nesting accepted: TUF's documents are six levels deep; custom fields may add some.
    static let maximumDepth = 64

    /// Parses one strict JSON document.
    package static func parse(_ bytes: [UInt8]) throws -> TUFJSON {
        var builder = Builder()
        try StrictJSON.parse(bytes, integersOnly: true, maximumDepth: maximumDepth, into: &builder)
        guard let value = builder.result else { throw StrictJSON.Refusal(reason: "the document is empty", offset: 0) }
        return value
    }

    /// Builds the tree from the parser's events.
    private struct Builder: StrictJSON.Handler {
        /// Containers being filled, innermost last, each with the key it will be stored under.
        var open: [(key: String?, isObject: Bool, members: [(String, TUFJSON)], items: [TUFJSON])] = []
        var pendingKey: String? = nil
        var result: TUFJSON? = nil

        mutating func add(_ value: TUFJSON) {
            guard !open.isEmpty else { result = value; return }
            if open[open.count - 1].isObject {
                open[open.count - 1].members.append((pendingKey ?? "", value))
                pendingKey = nil
            } else {
                open[open.count - 1].items.append(value)
            }
        }

        mutating func begin(isObject: Bool) {
            open.append((key: pendingKey, isObject: isObject, members: [], items: []))
            pendingKey = nil
        }

        mutating func end() {
            let closed = open.removeLast()
            pendingKey = closed.key
            add(closed.isObject ? .object(closed.members) : .array(closed.items))
        }

        mutating func key(_ key: String) { pendingKey = key }

        mutating func scalar(_ value: StrictJSON.Scalar) {
            switch value {
            case .string(let text): add(.string(text))
            case .number(let digits): add(.number(digits == "-0" ? "0" : digits))
            case .bool(let flag): add(.bool(flag))
            case .null: add(.null)
            }
        }
    }

    // MARK: Canonical form

    /// The canonical JSON securesystemslib signs: no whitespace, object keys sorted by code
    /// point, strings with only `\` and `"` escaped (every other character as its UTF-8 bytes).
    package var canonical: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        encode(into: &out, escaping: false)
        return out
    }

    /// The same as RFC 8259 JSON (what is written to files): control characters in strings
    /// escaped, which the canonical form leaves raw (a PEM key's newlines) and JSON forbids.
    package var serialized: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        encode(into: &out, escaping: true)
        return out
    }

    private func encode(into out: inout [UInt8], escaping: Bool) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let digits): out.append(contentsOf: digits.utf8)
        case .string(let text): Self.encode(string: text, into: &out, escaping: escaping)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.encode(into: &out, escaping: escaping)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            let sorted = members.sorted { $0.0.unicodeScalars.lexicographicallyPrecedes($1.0.unicodeScalars) }
            for (index, member) in sorted.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Self.encode(string: member.0, into: &out, escaping: escaping)
                out.append(UInt8(ascii: ":"))
                member.1.encode(into: &out, escaping: escaping)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func encode(string: String, into out: inout [UInt8], escaping: Bool) {
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            if escaping, byte < 0x20 {
                let hex = Array("0123456789abcdef".utf8)
                switch byte {
                case 0x0A: out.append(contentsOf: Array("\\n".utf8))
                case 0x09: out.append(contentsOf: Array("\\t".utf8))
                case 0x0D: out.append(contentsOf: Array("\\r".utf8))
                default: out.append(contentsOf: Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
                }
                continue
            }
            if byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "\"") { out.append(UInt8(ascii: "\\")) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }

    // MARK: Reading fields

    package subscript(key: String) -> TUFJSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.0 == key }?.1
    }

    package var objectMembers: [(String, TUFJSON)]? {
        if case .object(let members) = self { return members }
        return nil
    }

    package var arrayItems: [TUFJSON]? {
        if case .array(let items) = self { return items }
        return nil
    }

    package var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    package var boolValue: Bool? {
        if case .bool(let flag) = self { return flag }
        return nil
    }

    /// The integer, when it fits in 64 bits.
    package var integerValue: Int64? {
        if case .number(let digits) = self { return Int64(digits) }
        return nil
    }
}
