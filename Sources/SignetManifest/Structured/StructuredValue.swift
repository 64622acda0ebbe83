import Foundation
import SignetCore
import SignetCrypto

/// How a resource packed with `--structured` is parsed for key-by-key re-verification
/// (FORMAT.md §2, "Structured resources").
public enum StructuredFormat: String, Sendable, Equatable, CaseIterable {
    /// RFC 8259 JSON, read as strictly as Signet's own documents (no duplicate keys, no byte
    /// order mark, valid UTF-8), fractions and exponents allowed.
    case json
    /// An Apple property list, XML (`<plist>`) or binary (`bplist00`); either form is accepted
    /// later, whichever the signed one was.
    case plist

    /// The largest structured resource Signet parses: 16 MiB.
    public static let maximumSize = 16 << 20
    /// Deepest nesting accepted.
    static let maximumDepth = 64
    /// Most values one document may expand to (a binary property list can refer to one object
    /// many times).
    static let maximumValues = 1 << 20
    /// Most bytes of strings and data one document may expand to: a binary property list that
    /// refers to one large data object many times is refused before it is copied (four times
    /// the largest document; JSON and XML cannot expand beyond their own size).
    static let maximumExpandedBytes = 4 * maximumSize

    /// The format of `bytes` judged by its first bytes: `bplist` or `<` (after white space) is a
    /// property list, anything else JSON.
    package static func detect(_ bytes: [UInt8]) -> StructuredFormat {
        if bytes.starts(with: Array("bplist".utf8)) { return .plist }
        let first = bytes.first { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }
        return first == UInt8(ascii: "<") ? .plist : .json
    }

    /// Parses `bytes` in this format into the compact form compared key by key. Throws
    /// ``StructuredValue/ParseError`` naming what is wrong.
    package func parse(_ bytes: [UInt8]) throws -> StructuredDocument {
        guard bytes.count <= Self.maximumSize else {
            throw StructuredValue.ParseError("it is \(bytes.count) bytes; structured files are compared key by key up to \(Self.maximumSize) bytes")
        }
        switch self {
        case .json: return try StructuredDocument.json(bytes)
        case .plist:
            if bytes.starts(with: Array("bplist".utf8)) { return try BinaryPropertyList.parse(bytes) }
            return try XMLPropertyList.parse(bytes)
        }
    }
}

/// A parsed JSON document or property list, compared key by key.
package indirect enum StructuredValue: Equatable {
    case null
    case bool(Bool)
    /// A number written in decimal (JSON, XML property lists, binary integers), as canonical
    /// text of its exact value (``canonicalNumber(_:)``): 1, 1.0 and 1e0 are one number, and
    /// 9007199254740993 is not 9007199254740992.0, as they would be as `Double`s.
    case number(String)
    /// A binary property list's IEEE double (compared with a decimal by its exact value).
    case real(Double)
    case string(String)
    case data([UInt8])
    /// Seconds since 2001-01-01T00:00:00Z, as property lists keep dates.
    case date(Double)
    case array([StructuredValue])
    case dictionary([Key: StructuredValue])

    /// A dictionary key, equal to another only when its Unicode scalars are (Swift's String
    /// equality would make an NFC key and its NFD twin one key).
    package struct Key: Hashable, Comparable {
        package let text: String
        package init(_ text: String) { self.text = text }
        package static func == (a: Key, b: Key) -> Bool { a.text.unicodeScalars.elementsEqual(b.text.unicodeScalars) }
        package func hash(into hasher: inout Hasher) { for scalar in text.unicodeScalars { hasher.combine(scalar.value) } }
        package static func < (a: Key, b: Key) -> Bool { a.text.unicodeScalars.lexicographicallyPrecedes(b.text.unicodeScalars) }
    }

    /// Why a document could not be parsed, in the parser's words.
    package struct ParseError: Error, CustomStringConvertible {
        package let description: String
        init(_ description: String) { self.description = description }
    }

    package static func == (a: StructuredValue, b: StructuredValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.number(let x), .number(let y)): return x == y
        case (.real(let x), .real(let y)): return x == y || (x.isNaN && y.isNaN)
        // The same number to a reader of the document when the double's exact value is the
        // decimal's (checked cheaply first: the decimal must round to that double).
        case (.number(let x), .real(let y)), (.real(let y), .number(let x)):
            guard y.isFinite, Double(x) == y else { return false }
            return exactDecimal(y) == x
        case (.string(let x), .string(let y)): return x.unicodeScalars.elementsEqual(y.unicodeScalars)
        case (.data(let x), .data(let y)): return x == y
        case (.date(let x), .date(let y)): return x == y
        case (.array(let x), .array(let y)): return x == y
        case (.dictionary(let x), .dictionary(let y)): return x == y
        default: return false
        }
    }

    /// Canonical decimal text of a whole number written as `text` (digits with an optional
    /// sign), or nil.
    static func canonicalInteger(_ text: Substring) -> String? {
        var digits = text
        if digits.first == "-" || digits.first == "+" { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return canonicalNumber(text)
    }

    /// The canonical text of the exact value of a decimal number `[+-]DIGITS[.DIGITS][(e|E)[+-]DIGITS]`
    /// (nil for anything else, or an exponent beyond ±10^15): "0"; a whole number as its digits
    /// with a `-` if negative (up to 64 trailing zeros written out); any other as
    /// `[-]0.DIGITSeEXP` (value 0.DIGITS × 10^EXP, no leading or trailing zero digit). Two texts
    /// are the same number exactly when their canonical texts are equal.
    package static func canonicalNumber(_ text: Substring) -> String? {
        // The common case, a whole number already canonical ("0", "-12", "345"), as it is.
        let utf8 = text.utf8
        if let first = utf8.first, utf8.count <= 64 {
            let digits = first == UInt8(ascii: "-") ? utf8.dropFirst() : utf8[...]
            if let lead = digits.first, lead != UInt8(ascii: "0") || digits.count == 1,
                digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                !(first == UInt8(ascii: "-") && lead == UInt8(ascii: "0"))
            {
                return String(text)
            }
        }
        var bytes = Array(text.utf8)[...]
        var negative = false
        if let first = bytes.first, first == UInt8(ascii: "-") || first == UInt8(ascii: "+") {
            negative = first == UInt8(ascii: "-")
            bytes = bytes.dropFirst()
        }
        func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
        let whole = bytes.prefix(while: isDigit)
        bytes = bytes.dropFirst(whole.count)
        var fraction: ArraySlice<UInt8> = []
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            fraction = bytes.prefix(while: isDigit)
            bytes = bytes.dropFirst(fraction.count)
        }
        guard !whole.isEmpty || !fraction.isEmpty else { return nil }
        var exponent = 0
        if let e = bytes.first, e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            var exponentNegative = false
            if let sign = bytes.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") {
                exponentNegative = sign == UInt8(ascii: "-")
                bytes = bytes.dropFirst()
            }
            let digits = bytes.prefix(while: isDigit).drop { $0 == UInt8(ascii: "0") }
            guard !bytes.prefix(while: isDigit).isEmpty, digits.count <= 15 else { return nil }
            bytes = bytes.dropFirst(bytes.prefix(while: isDigit).count)
            exponent = digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
            if exponentNegative { exponent = -exponent }
        }
        guard bytes.isEmpty else { return nil }
        // value = 0.DIGITS × 10^point
        var digits = Array(whole) + Array(fraction)
        var point = whole.count + exponent
        let leading = digits.prefix { $0 == UInt8(ascii: "0") }.count
        digits.removeFirst(leading)
        point -= leading
        while digits.last == UInt8(ascii: "0") { digits.removeLast() }
        if digits.isEmpty { return "0" }
        let sign = negative ? "-" : ""
        if point >= digits.count && point - digits.count <= 64 {
            return sign + String(decoding: digits, as: UTF8.self) + String(repeating: "0", count: point - digits.count)
        }
        return sign + "0." + String(decoding: digits, as: UTF8.self) + "e" + String(point)
    }

    /// The canonical text (``canonicalNumber(_:)``) of a finite double's exact value: its
    /// significand times a power of two, written out in decimal with a digit array.
    package static func exactDecimal(_ value: Double) -> String? {
        guard value.isFinite else { return nil }
        if value == 0 { return "0" }
        let bits = value.bitPattern
        let exponentBits = Int((bits >> 52) & 0x7FF)
        var mantissa = bits & ((1 << 52) - 1)
        var power = exponentBits == 0 ? -1074 : exponentBits - 1075
        if exponentBits != 0 { mantissa |= 1 << 52 }
        while mantissa & 1 == 0 && power < 0 {
            mantissa >>= 1
            power += 1
        }
        // Little-endian base-10^9 limbs of the integer mantissa × 2^power (power ≥ 0) or
        // mantissa × 5^-power (power < 0, then divided by 10^-power through the exponent).
        var limbs: [UInt64] = [mantissa % 1_000_000_000, mantissa / 1_000_000_000 % 1_000_000_000, mantissa / 1_000_000_000_000_000_000]
        func multiply(by factor: UInt64) {
            var carry: UInt64 = 0
            for index in limbs.indices {
                let product = limbs[index] * factor + carry
                limbs[index] = product % 1_000_000_000
                carry = product / 1_000_000_000
            }
            while carry > 0 {
                limbs.append(carry % 1_000_000_000)
                carry /= 1_000_000_000
            }
        }
        var remaining = abs(power)
        let (step, stepFactor): (Int, UInt64) = power >= 0 ? (29, 1 << 29) : (12, 244_140_625) // 2^29, 5^12
        while remaining >= step {
            multiply(by: stepFactor)
            remaining -= step
        }
        if remaining > 0 { multiply(by: power >= 0 ? 1 << UInt64(remaining) : (0..<remaining).reduce(UInt64(1)) { value, _ in value * 5 }) }
        while limbs.count > 1 && limbs.last == 0 { limbs.removeLast() }
        var text = String(limbs.last!)
        for limb in limbs.dropLast().reversed() {
            let part = String(limb)
            text += String(repeating: "0", count: 9 - part.count) + part
        }
        let written = (value < 0 ? "-" : "") + text + (power < 0 ? "e-\(-power)" : "")
        return canonicalNumber(Substring(written))
    }

    // MARK: JSON

    /// Parses strict JSON (``/SignetCore/StrictJSON``: duplicate keys, a byte order mark, invalid UTF-8 and
    /// the other constructs parsers read differently are refused), fractions allowed, as a tree
    /// (small documents: configuration files; resources use ``StructuredDocument/json(_:)``).
    package static func json(_ bytes: [UInt8]) throws -> StructuredValue {
        try StructuredDocument.json(bytes).value
    }
}

extension StructuredDocument {
    /// Parses strict JSON (``/SignetCore/StrictJSON``) into the compact form.
    static func json(_ bytes: [UInt8]) throws -> StructuredDocument {
        var handler = JSONBuilder(builder: Builder(reserving: bytes.count, source: bytes))
        do {
            try StrictJSON.parse(bytes, maximumDepth: StructuredFormat.maximumDepth, into: &handler)
        } catch let refusal as StrictJSON.Refusal {
            throw StructuredValue.ParseError("it is not JSON as Signet reads it: \(refusal)")
        }
        guard handler.builder.isComplete else { throw StructuredValue.ParseError("it holds no JSON value") }
        return handler.builder.document
    }

    /// ``/SignetCore/StrictJSON``'s events into a ``Builder`` (StrictJSON has refused duplicate keys; a
    /// 16 MiB document holds at most 8 Mi values, well within the 32-bit indexes). A string
    /// without escapes and a number already canonical refer to the document's own bytes.
    private struct JSONBuilder: StrictJSON.Handler {
        var builder: Builder

        mutating func begin(isObject: Bool) throws { builder.begin(dictionary: isObject) }

        mutating func end() throws { builder.end() }

        mutating func key(_ key: String) throws { builder.key(key) }

        mutating func key(_ key: String, raw: Range<Int>) throws {
            if builder.sourceEscapes(raw) { builder.key(key) } else { builder.source(.string, raw, isKey: true) }
        }

        mutating func scalar(_ value: StrictJSON.Scalar) throws { try scalar(value, raw: nil) }

        mutating func scalar(_ value: StrictJSON.Scalar, raw: Range<Int>) throws { try scalar(value, raw: Optional(raw)) }

        private mutating func scalar(_ value: StrictJSON.Scalar, raw: Range<Int>?) throws {
            switch value {
            case .null: builder.null()
            case .bool(let flag): builder.bool(flag)
            case .string(let text):
                if let raw, !builder.sourceEscapes(raw) { builder.source(.string, raw) } else { builder.string(text) }
            case .number(let text):
                guard let number = StructuredValue.canonicalNumber(Substring(text)) else {
                    throw StructuredValue.ParseError("it is not JSON as Signet reads it: the number \(text.prefix(40)) has an exponent beyond ±10^15")
                }
                if let raw, builder.sourceHolds(raw, number) { builder.source(.number, raw) } else { builder.number(number) }
            }
        }
    }
}

// MARK: Key paths

/// A key path in a structured resource: dictionary keys and array indexes joined by `.`
/// (`server.url`, `items.0.name`). In a key, `\` escapes `.`, `*` and `\` itself; in a pattern,
/// a component `*` stands for any one key or index (`items.*.name`).
public struct KeyPath: Hashable, Sendable, CustomStringConvertible {
    /// The components, unescaped; for a pattern, nil stands for `*`.
    package let components: [String?]

    init(components: [String?]) { self.components = components }

    /// Parses a dotted path; nil if it is empty or has an empty component or a dangling `\`.
    public init?(_ text: String) {
        guard !text.isEmpty else { return nil }
        var components: [String?] = []
        var current = ""
        var escaped = false
        var wildcard = true
        for character in text {
            if escaped {
                current.append(character)
                escaped = false
                wildcard = false
            } else if character == "\\" {
                escaped = true
            } else if character == "." {
                guard !current.isEmpty else { return nil }
                components.append(wildcard && current == "*" ? nil : current)
                current = ""
                wildcard = true
            } else {
                current.append(character)
            }
        }
        guard !escaped, !current.isEmpty else { return nil }
        components.append(wildcard && current == "*" ? nil : current)
        self.components = components
    }

    /// The dotted text, escaped so that ``init(_:)`` reads it back; "" for the document itself.
    public var description: String {
        components.map { component in
            guard let component else { return "*" }
            var escaped = ""
            for character in component {
                if character == "." || character == "\\" || (character == "*" && component == "*") { escaped.append("\\") }
                escaped.append(character)
            }
            return escaped
        }.joined(separator: ".")
    }

    /// Whether this pattern covers `path`: it names `path` or one of its ancestors.
    package func covers(_ path: KeyPath) -> Bool {
        guard components.count <= path.components.count else { return false }
        return zip(components, path.components).allSatisfy { pattern, component in pattern == nil || pattern == component }
    }
}

/// One difference between a structured resource as signed and as it is now.
public struct KeyChange: Sendable, Equatable, CustomStringConvertible {
    /// What happened at the key path.
    public enum Kind: String, Sendable {
        /// The value (or its type) differs.
        case changed
        /// The key or array element is new.
        case added
        /// The key or array element is gone.
        case removed
    }

    /// Where: the dotted key path ("" for the whole document).
    public let path: KeyPath
    /// What happened there.
    public let kind: Kind
    /// Whether a rule (`--allow-key`, `allow_keys`) allows this key to change.
    public let allowed: Bool

    /// `server.url (changed)`, `(document) (changed)`.
    public var description: String {
        "\(path.components.isEmpty ? "(the whole document)" : path.description) (\(kind.rawValue)\(allowed ? ", allowed" : ""))"
    }
}

extension StructuredValue {
    /// Every difference from `old` to `new` (``StructuredDocument/changes(from:to:allowed:)``).
    package static func changes(from old: StructuredValue, to new: StructuredValue, allowed: [KeyPath]) -> [KeyChange] {
        StructuredDocument.changes(from: StructuredDocument(old), to: StructuredDocument(new), allowed: allowed)
    }
}
