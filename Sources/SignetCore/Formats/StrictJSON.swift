/// A strict RFC 8259 check of JSON that is signed or otherwise trusted, run before Foundation
/// decodes it.
///
/// Foundation's decoders keep the first of two duplicate keys and Python's keep the last, so a
/// signed document with `"sequence": 999, "sequence": 5` means different things to different
/// readers: whoever checks the signature and whoever acts on it must agree on what was signed.
/// This refuses every construct on which JSON parsers are known to differ: duplicate keys (also
/// keys that differ only by escapes, `"a"` and `"\u0061"`, or by Unicode normalisation), a byte
/// order mark, invalid UTF-8, lone surrogate escapes, control characters in strings, leading
/// zeros, trailing content, and nesting deeper than ``maximumDepth``. With `integersOnly`,
/// numbers with a fraction or exponent (`5.0`, `1e3`) are refused too.
package enum StrictJSON {
    /// Deepest nesting accepted (Signet's documents are three levels deep).
    @usableFromInline static let maximumDepth = 32

    /// Why a document was refused, for a person.
    package struct Refusal: Error, CustomStringConvertible {
        let reason: String
        let offset: Int
        package init(reason: String, offset: Int) { (self.reason, self.offset) = (reason, offset) }
        package var description: String { "\(reason) (at byte \(offset))" }
    }

    /// A scalar value as the parser met it.
    package enum Scalar: Equatable {
        /// A string, escapes resolved.
        case string(String)
        /// A number, as written (already checked against RFC 8259's grammar).
        case number(String)
        case bool(Bool)
        case null
    }

    /// Receives a document's structure as it is parsed (a pull of events, so a caller builds
    /// only what it keeps, never a tree of the whole document). Whatever it throws ends the parse.
    package protocol Handler {
        /// `{` (`isObject`) or `[`.
        mutating func begin(isObject: Bool) throws
        /// `}` or `]`.
        mutating func end() throws
        /// An object's key; its value follows.
        mutating func key(_ key: String) throws
        mutating func scalar(_ value: Scalar) throws
        /// The same, with where the key's or value's text is in the document (a string's
        /// between its quotes, escapes as written; a number's digits): a handler that keeps
        /// the document can refer to it instead of copying. By default the plain forms.
        mutating func key(_ key: String, raw: Range<Int>) throws
        mutating func scalar(_ value: Scalar, raw: Range<Int>) throws
    }

    /// The handler of ``check(_:integersOnly:)``: keeps nothing.
    private struct Ignore: Handler {
        func begin(isObject: Bool) {}
        func end() {}
        func key(_ key: String) {}
        func scalar(_ value: Scalar) {}
    }

    /// Throws ``Refusal`` unless `bytes` is one strict JSON value.
    package static func check(_ bytes: [UInt8], integersOnly: Bool = false) throws {
        var ignore = Ignore()
        try parse(bytes, integersOnly: integersOnly, into: &ignore)
    }

    /// Parses `bytes` strictly (see the type's comment), reporting its structure to `handler`.
    /// Throws ``Refusal`` for a document that is not strict JSON, or what `handler` throws.
    /// `maximumDepth`: deepest nesting accepted (resources packed as structured may nest deeper
    /// than Signet's own documents).
    @inlinable
    package static func parse<H: Handler>(_ bytes: [UInt8], integersOnly: Bool = false, maximumDepth: Int = StrictJSON.maximumDepth, into handler: inout H)
        throws
    {
        try bytes.withUnsafeBufferPointer { buffer in
            var parser = Parser(bytes: buffer, integersOnly: integersOnly, maximumDepth: maximumDepth, handler: handler)
            defer { handler = parser.handler }
            if buffer.count >= 3, buffer[0] == 0xEF, buffer[1] == 0xBB, buffer[2] == 0xBF {
                throw Refusal(reason: "it starts with a byte order mark", offset: 0)
            }
            parser.skipSpace()
            try parser.value(depth: 0)
            parser.skipSpace()
            guard parser.at == buffer.count else { throw parser.refusal("there is content after the document") }
        }
    }

    @usableFromInline
    struct Parser<H: Handler> {
        @usableFromInline let bytes: UnsafeBufferPointer<UInt8>
        @usableFromInline let integersOnly: Bool
        @usableFromInline let maximumDepth: Int
        @usableFromInline var handler: H
        @usableFromInline var at = 0
        /// The keys of the objects being parsed, innermost last (one buffer for the document).
        @usableFromInline var openKeys: [String] = []

        @inlinable init(bytes: UnsafeBufferPointer<UInt8>, integersOnly: Bool, maximumDepth: Int, handler: H) {
            self.bytes = bytes
            self.integersOnly = integersOnly
            self.maximumDepth = maximumDepth
            self.handler = handler
        }

        /// Keys of one object compared one by one before a set is built for them.
        @inlinable static var listedKeys: Int { 16 }

        @inlinable func refusal(_ reason: String) -> Refusal { Refusal(reason: reason, offset: at) }

        @inlinable var current: UInt8? { at < bytes.count ? bytes[at] : nil }

        @inlinable mutating func skipSpace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { at += 1 }
        }

        @inlinable mutating func expect(_ literal: StaticString) throws {
            let count = literal.utf8CodeUnitCount
            guard at + count <= bytes.count else { throw refusal("the document ends too early") }
            for index in 0..<count where bytes[at + index] != literal.utf8Start[index] {
                throw refusal("unexpected characters")
            }
            at += count
        }

        @inlinable mutating func value(depth: Int) throws {
            guard depth <= maximumDepth else { throw refusal("it is nested more than \(maximumDepth) levels deep") }
            guard let byte = current else { throw refusal("the document ends too early") }
            switch byte {
            case UInt8(ascii: "{"): try object(depth: depth + 1)
            case UInt8(ascii: "["): try array(depth: depth + 1)
            case UInt8(ascii: "\""):
                let start = at + 1
                let text = try string()
                try handler.scalar(.string(text), raw: start..<(at - 1))
            case UInt8(ascii: "t"):
                try expect("true")
                try handler.scalar(.bool(true))
            case UInt8(ascii: "f"):
                try expect("false")
                try handler.scalar(.bool(false))
            case UInt8(ascii: "n"):
                try expect("null")
                try handler.scalar(.null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                let start = at
                try number()
                try handler.scalar(.number(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)), raw: start..<at)
            default: throw refusal("unexpected character")
            }
        }

        @inlinable mutating func object(depth: Int) throws {
            at += 1
            try handler.begin(isObject: true)
            skipSpace()
            if current == UInt8(ascii: "}") {
                at += 1
                try handler.end()
                return
            }
            // Keys seen in this object: a short list (Signet's objects have a few keys each, and
            // 50,000 file entries should not cost 50,000 hash sets), a set past `listedKeys`.
            // They sit on `openKeys` above the enclosing objects' keys until the object ends.
            let base = openKeys.count
            defer { openKeys.removeSubrange(base...) }
            var keys = Set<String>()
            while true {
                guard current == UInt8(ascii: "\"") else { throw refusal("an object key is not a string") }
                let keyStart = at
                let key = try string()
                let keyEnd = at - 1
                // Swift compares Strings by canonical equivalence: NFC/NFD twins are duplicates too.
                let repeated: Bool
                if openKeys.count - base < Self.listedKeys {
                    repeated = openKeys[base...].contains(key)
                    openKeys.append(key)
                } else {
                    if keys.isEmpty { keys = Set(openKeys[base...]) }
                    repeated = !keys.insert(key).inserted
                }
                guard !repeated else {
                    throw Refusal(reason: "the key \"\(key)\" appears twice in one object", offset: keyStart)
                }
                skipSpace()
                guard current == UInt8(ascii: ":") else { throw refusal("an object key is not followed by ':'") }
                at += 1
                skipSpace()
                try handler.key(key, raw: (keyStart + 1)..<keyEnd)
                try value(depth: depth)
                skipSpace()
                guard let byte = current else { throw refusal("the document ends inside an object") }
                at += 1
                if byte == UInt8(ascii: "}") { return try handler.end() }
                guard byte == UInt8(ascii: ",") else { throw refusal("expected ',' or '}' in an object") }
                skipSpace()
            }
        }

        mutating func array(depth: Int) throws {
            at += 1
            try handler.begin(isObject: false)
            skipSpace()
            if current == UInt8(ascii: "]") {
                at += 1
                try handler.end()
                return
            }
            while true {
                try value(depth: depth)
                skipSpace()
                guard let byte = current else { throw refusal("the document ends inside an array") }
                at += 1
                if byte == UInt8(ascii: "]") { return try handler.end() }
                guard byte == UInt8(ascii: ",") else { throw refusal("expected ',' or ']' in an array") }
                skipSpace()
            }
        }

        /// A string, decoded (escapes resolved), so keys are compared as every parser sees them.
        mutating func string() throws -> String {
            at += 1
            // Most strings have no escapes: validated straight from the document, no copy first.
            var end = at
            var high: UInt8 = 0
            while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20 {
                high |= bytes[end]
                end += 1
            }
            if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
                let raw = UnsafeBufferPointer(rebasing: bytes[at..<end])
                // ASCII needs no validation (and String(validating:) is generic, unspecialised
                // here: a tenth of a 50,000-file manifest's parse went into its metadata lookups).
                let text: String
                if high < 0x80 {
                    text = String(decoding: raw, as: UTF8.self)
                } else {
                    guard let valid = String(validating: raw, as: UTF8.self) else { throw refusal("a string is not valid UTF-8") }
                    text = valid
                }
                at = end + 1
                return text
            }
            var decoded: [UInt8] = []
            while true {
                guard let byte = current else { throw refusal("the document ends inside a string") }
                at += 1
                switch byte {
                case UInt8(ascii: "\""):
                    guard let text = String(validating: decoded, as: UTF8.self) else { throw refusal("a string is not valid UTF-8") }
                    return text
                case 0x00..<0x20:
                    throw refusal("a string holds a raw control character")
                case UInt8(ascii: "\\"):
                    guard let escape = current else { throw refusal("the document ends inside a string") }
                    at += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                    case UInt8(ascii: "b"): decoded.append(0x08)
                    case UInt8(ascii: "f"): decoded.append(0x0C)
                    case UInt8(ascii: "n"): decoded.append(0x0A)
                    case UInt8(ascii: "r"): decoded.append(0x0D)
                    case UInt8(ascii: "t"): decoded.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard current == UInt8(ascii: "\\"), at + 1 < bytes.count, bytes[at + 1] == UInt8(ascii: "u") else {
                                throw refusal("a string holds a lone surrogate escape")
                            }
                            at += 2
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw refusal("a string holds a lone surrogate escape") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw refusal("a string holds a lone surrogate escape")
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw refusal("a string holds an invalid escape") }
                        decoded.append(contentsOf: String(Character(unicode)).utf8)
                    default:
                        throw refusal("a string holds an unknown escape")
                    }
                default:
                    decoded.append(byte)
                }
            }
        }

        mutating func hex4() throws -> UInt32 {
            guard at + 4 <= bytes.count else { throw refusal("the document ends inside a string") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[at]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw refusal("a \\u escape is not four hex digits")
                }
                value = value << 4 | digit
                at += 1
            }
            return value
        }

        mutating func digits() -> Int {
            let start = at
            while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { at += 1 }
            return at - start
        }

        mutating func number() throws {
            if current == UInt8(ascii: "-") { at += 1 }
            let leading = current
            let count = digits()
            guard count > 0 else { throw refusal("a number has no digits") }
            guard !(leading == UInt8(ascii: "0") && count > 1) else { throw refusal("a number has a leading zero") }
            if current == UInt8(ascii: ".") {
                guard !integersOnly else { throw refusal("a number has a fraction; only whole numbers are allowed here") }
                at += 1
                guard digits() > 0 else { throw refusal("a number's fraction has no digits") }
            }
            if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
                guard !integersOnly else { throw refusal("a number has an exponent; only whole numbers are allowed here") }
                at += 1
                if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { at += 1 }
                guard digits() > 0 else { throw refusal("a number's exponent has no digits") }
            }
        }
    }
}

extension StrictJSON.Handler {
    package mutating func key(_ key: String, raw: Range<Int>) throws { try self.key(key) }
    package mutating func scalar(_ value: StrictJSON.Scalar, raw: Range<Int>) throws { try scalar(value) }
}
