import Foundation

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

    /// The format of `bytes` judged by its first bytes: `bplist` or `<` (after white space) is a
    /// property list, anything else JSON.
    static func detect(_ bytes: [UInt8]) -> StructuredFormat {
        if bytes.starts(with: Array("bplist".utf8)) { return .plist }
        let first = bytes.first { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }
        return first == UInt8(ascii: "<") ? .plist : .json
    }

    /// Parses `bytes` in this format. Throws ``StructuredValue/ParseError`` naming what is wrong.
    func parse(_ bytes: [UInt8]) throws -> StructuredValue {
        guard bytes.count <= Self.maximumSize else {
            throw StructuredValue.ParseError("it is \(bytes.count) bytes; structured files are compared key by key up to \(Self.maximumSize) bytes")
        }
        switch self {
        case .json: return try StructuredValue.json(bytes)
        case .plist:
            if bytes.starts(with: Array("bplist".utf8)) { return try BinaryPropertyList.parse(bytes) }
            return try XMLPropertyList.parse(bytes)
        }
    }
}

/// A parsed JSON document or property list, compared key by key.
indirect enum StructuredValue: Equatable {
    case null
    case bool(Bool)
    /// A whole number, as canonical decimal text (no sign on zero, no leading zeros).
    case integer(String)
    case real(Double)
    case string(String)
    case data([UInt8])
    /// Seconds since 2001-01-01T00:00:00Z, as property lists keep dates.
    case date(Double)
    case array([StructuredValue])
    case dictionary([Key: StructuredValue])

    /// A dictionary key, equal to another only when its Unicode scalars are (Swift's String
    /// equality would make an NFC key and its NFD twin one key).
    struct Key: Hashable, Comparable {
        let text: String
        init(_ text: String) { self.text = text }
        static func == (a: Key, b: Key) -> Bool { a.text.unicodeScalars.elementsEqual(b.text.unicodeScalars) }
        func hash(into hasher: inout Hasher) { for scalar in text.unicodeScalars { hasher.combine(scalar.value) } }
        static func < (a: Key, b: Key) -> Bool { a.text.unicodeScalars.lexicographicallyPrecedes(b.text.unicodeScalars) }
    }

    /// Why a document could not be parsed, in the parser's words.
    struct ParseError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    static func == (a: StructuredValue, b: StructuredValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.bool(let x), .bool(let y)): return x == y
        case (.integer(let x), .integer(let y)): return x == y
        case (.real(let x), .real(let y)): return x == y || (x.isNaN && y.isNaN)
        // 1 and 1.0 are the same number to a reader of the document.
        case (.integer(let x), .real(let y)), (.real(let y), .integer(let x)): return Double(x) == y
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
        var negative = false
        if digits.first == "-" || digits.first == "+" {
            negative = digits.first == "-"
            digits = digits.dropFirst()
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        let trimmed = digits.drop { $0 == "0" }
        if trimmed.isEmpty { return "0" }
        return (negative ? "-" : "") + trimmed
    }

    // MARK: JSON

    /// Parses strict JSON (``StrictJSON``: duplicate keys, a byte order mark, invalid UTF-8 and
    /// the other constructs parsers read differently are refused), fractions allowed.
    static func json(_ bytes: [UInt8]) throws -> StructuredValue {
        var builder = Builder()
        do {
            try StrictJSON.parse(bytes, maximumDepth: StructuredFormat.maximumDepth, into: &builder)
        } catch let refusal as StrictJSON.Refusal {
            throw ParseError("it is not JSON as Signet reads it: \(refusal)")
        }
        guard let value = builder.result else { throw ParseError("it holds no JSON value") }
        return value
    }

    /// Builds the tree from ``StrictJSON``'s events.
    private struct Builder: StrictJSON.Handler {
        enum Open {
            case array([StructuredValue])
            case object([Key: StructuredValue], key: String?)
        }
        var stack: [Open] = []
        var result: StructuredValue?

        mutating func begin(isObject: Bool) throws {
            stack.append(isObject ? .object([:], key: nil) : .array([]))
        }

        mutating func end() throws {
            switch stack.removeLast() {
            case .array(let items): add(.array(items))
            case .object(let fields, _): add(.dictionary(fields))
            }
        }

        mutating func key(_ key: String) throws {
            guard case .object(let fields, _) = stack.removeLast() else { return }
            stack.append(.object(fields, key: key))
        }

        mutating func scalar(_ value: StrictJSON.Scalar) throws {
            switch value {
            case .null: add(.null)
            case .bool(let flag): add(.bool(flag))
            case .string(let text): add(.string(text))
            case .number(let text):
                if let integer = canonicalInteger(Substring(text)) {
                    add(.integer(integer))
                } else {
                    add(.real(Double(text) ?? .nan))
                }
            }
        }

        private mutating func add(_ value: StructuredValue) {
            guard let top = stack.popLast() else {
                result = value
                return
            }
            switch top {
            case .array(var items):
                items.append(value)
                stack.append(.array(items))
            case .object(var fields, let key):
                // StrictJSON has refused duplicate keys already.
                fields[Key(key ?? "")] = value
                stack.append(.object(fields, key: nil))
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
    let components: [String?]

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
    func covers(_ path: KeyPath) -> Bool {
        guard components.count <= path.components.count else { return false }
        return zip(components, path.components).allSatisfy { pattern, component in pattern == nil || pattern == component }
    }

    /// Whether this pattern names at least one value in `value`.
    func exists(in value: StructuredValue) -> Bool {
        func walk(_ value: StructuredValue, _ rest: ArraySlice<String?>) -> Bool {
            guard let first = rest.first else { return true }
            switch value {
            case .dictionary(let fields):
                if let name = first { return fields[.init(name)].map { walk($0, rest.dropFirst()) } ?? false }
                return fields.values.contains { walk($0, rest.dropFirst()) }
            case .array(let items):
                if let name = first {
                    guard let index = Int(name), String(index) == name, items.indices.contains(index) else { return false }
                    return walk(items[index], rest.dropFirst())
                }
                return items.contains { walk($0, rest.dropFirst()) }
            default:
                return false
            }
        }
        return walk(value, components[...])
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
    /// Every difference from `old` to `new`, deepest first where both hold a container, in key
    /// order; each marked allowed when one of `allowed` covers it.
    static func changes(from old: StructuredValue, to new: StructuredValue, allowed: [KeyPath]) -> [KeyChange] {
        var found: [KeyChange] = []
        func note(_ path: [String?], _ kind: KeyChange.Kind) {
            let keyPath = KeyPath(components: path)
            found.append(KeyChange(path: keyPath, kind: kind, allowed: allowed.contains { $0.covers(keyPath) }))
        }
        func walk(_ old: StructuredValue, _ new: StructuredValue, _ path: [String?]) {
            switch (old, new) {
            case (.dictionary(let a), .dictionary(let b)):
                for key in Set(a.keys).union(b.keys).sorted() {
                    switch (a[key], b[key]) {
                    case (let x?, let y?): walk(x, y, path + [key.text])
                    case (_?, nil): note(path + [key.text], .removed)
                    case (nil, _?): note(path + [key.text], .added)
                    case (nil, nil): break
                    }
                }
            case (.array(let a), .array(let b)):
                for index in 0..<max(a.count, b.count) {
                    if index < a.count && index < b.count {
                        walk(a[index], b[index], path + [String(index)])
                    } else {
                        note(path + [String(index)], index < a.count ? .removed : .added)
                    }
                }
            default:
                if old != new { note(path, .changed) }
            }
        }
        walk(old, new, [])
        return found
    }
}
