import SignetCore
import SignetCrypto
/// Reads a binary property list (`bplist00`) strictly into a ``StructuredDocument``.
///
/// Every offset, length and reference is checked against the file before it is used (checked
/// arithmetic throughout); an object that refers to itself, nesting deeper than
/// ``StructuredFormat/maximumDepth``, more than ``StructuredFormat/maximumValues`` values in
/// all (one object may be referred to many times), sets, UIDs, 128-bit integers, non-string
/// or duplicate dictionary keys and invalid text are refused.
enum BinaryPropertyList {
    static func parse(_ bytes: [UInt8]) throws -> StructuredDocument {
        var reader = try Reader(bytes)
        // References may repeat an object: text up to the expansion bound, values up to their own.
        var builder = StructuredDocument.Builder(reserving: bytes.count, source: bytes)
        try reader.value(reader.top, depth: 0, into: &builder)
        return builder.document
    }

    private struct Reader {
        let bytes: [UInt8]
        let offsetSize: Int
        let referenceSize: Int
        let count: Int
        let top: Int
        let table: Int
        var values = 0
        /// Bytes of strings and data read so far (one object may be referred to many times).
        var expanded = 0
        /// Objects being read (from the top down to here): met again, they refer to themselves.
        var open: Set<Int> = []

        static func fail(_ reason: String) -> StructuredValue.ParseError {
            StructuredValue.ParseError("it is not a binary property list as Signet reads it: \(reason)")
        }

        init(_ bytes: [UInt8]) throws {
            guard bytes.count >= 8 + 32, bytes.starts(with: Array("bplist00".utf8)) else { throw Self.fail("no bplist00 header and trailer") }
            self.bytes = bytes
            let trailer = bytes.count - 32
            offsetSize = Int(bytes[trailer + 6])
            referenceSize = Int(bytes[trailer + 7])
            guard [1, 2, 4, 8].contains(offsetSize), [1, 2, 4, 8].contains(referenceSize) else {
                throw Self.fail("the trailer's integer sizes are not 1, 2, 4 or 8")
            }
            func word(_ at: Int) -> UInt64 { bytes[at..<at + 8].reduce(0) { $0 << 8 | UInt64($1) } }
            let objects = word(trailer + 8), topObject = word(trailer + 16), tableOffset = word(trailer + 24)
            guard objects >= 1, topObject < objects, tableOffset >= 8, tableOffset < UInt64(trailer) else {
                throw Self.fail("the trailer points outside the file")
            }
            let (tableSize, overflow) = objects.multipliedReportingOverflow(by: UInt64(offsetSize))
            guard !overflow, tableSize <= UInt64(trailer) - tableOffset else { throw Self.fail("the offset table does not fit in the file") }
            count = Int(objects)
            top = Int(topObject)
            table = Int(tableOffset)
        }

        /// A big-endian unsigned integer of `size` bytes at `at`, inside the object area.
        func unsigned(at: Int, size: Int) throws -> UInt64 {
            guard size <= 8, at >= 0, at <= table, size <= table - at else { throw Self.fail("a value runs past the objects") }
            return bytes[at..<at + size].reduce(0) { $0 << 8 | UInt64($1) }
        }

        func offset(of object: Int) throws -> Int {
            let at = table + object * offsetSize
            let value = bytes[at..<at + offsetSize].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            guard value >= 8, value < UInt64(table) else { throw Self.fail("object \(object) lies outside the objects") }
            return Int(value)
        }

        /// The length in an object's marker, or the integer after it for 0xF; and where the
        /// content starts.
        func length(marker: UInt8, at: Int) throws -> (Int, Int) {
            let low = Int(marker & 0x0F)
            guard low == 0x0F else { return (low, at + 1) }
            let next = try unsigned(at: at + 1, size: 1)
            guard next & 0xF0 == 0x10, next & 0x0F <= 3 else { throw Self.fail("a length is not an integer") }
            let size = 1 << Int(next & 0x0F)
            let value = try unsigned(at: at + 2, size: size)
            guard value <= UInt64(table) else { throw Self.fail("a length runs past the objects") }
            return (Int(value), at + 2 + size)
        }

        /// `count` items of `size` bytes at `at` fit inside the object area.
        func fits(_ at: Int, _ count: Int, _ size: Int) throws {
            let (total, overflow) = count.multipliedReportingOverflow(by: size)
            guard !overflow, at <= table, total <= table - at else { throw Self.fail("an object runs past the objects") }
        }

        /// Counts `length` more bytes of strings, data or references against the bound on what
        /// the document expands to, before they are copied.
        mutating func expand(_ length: Int) throws {
            expanded += length
            guard expanded <= StructuredFormat.maximumExpandedBytes else {
                throw Self.fail(
                    "it expands to more than \(StructuredFormat.maximumExpandedBytes >> 20) MiB of strings and data (an object referred to many times)")
            }
        }

        /// Object `object` and everything it holds, appended to `builder` (a dictionary key with
        /// `asKey`, which must be a string).
        mutating func value(_ object: Int, depth: Int, into builder: inout StructuredDocument.Builder, asKey: Bool = false) throws {
            guard object < count else { throw Self.fail("a reference to object \(object) of \(count)") }
            guard depth <= StructuredFormat.maximumDepth else { throw Self.fail("it is nested more than \(StructuredFormat.maximumDepth) levels deep") }
            values += 1
            guard values <= StructuredFormat.maximumValues else { throw Self.fail("it expands to more than \(StructuredFormat.maximumValues) values") }
            let at = try offset(of: object)
            let marker = bytes[at]
            guard !asKey || marker >> 4 == 0x5 || marker >> 4 == 0x6 else { throw Self.fail("a dictionary key that is not a string") }
            switch marker >> 4 {
            case 0x0:
                switch marker {
                case 0x08: builder.bool(false)
                case 0x09: builder.bool(true)
                default: throw Self.fail("marker 0x\(String(marker, radix: 16)) is not a property list value")
                }
            case 0x1:
                let size = 1 << Int(marker & 0x0F)
                guard size <= 8 else { throw Self.fail("an integer of \(size) bytes") }
                let raw = try unsigned(at: at + 1, size: size)
                // 1, 2 and 4 bytes are unsigned; 8 bytes are two's complement.
                builder.number(size == 8 ? String(Int64(bitPattern: raw)) : String(raw))
            case 0x2:
                switch marker & 0x0F {
                case 2: builder.real(Double(Float(bitPattern: UInt32(try unsigned(at: at + 1, size: 4)))))
                case 3: builder.real(Double(bitPattern: try unsigned(at: at + 1, size: 8)))
                default: throw Self.fail("a real that is not 4 or 8 bytes")
                }
            case 0x3:
                guard marker == 0x33 else { throw Self.fail("a date that is not 8 bytes") }
                builder.date(Double(bitPattern: try unsigned(at: at + 1, size: 8)))
            case 0x4:
                let (length, start) = try length(marker: marker, at: at)
                try fits(start, length, 1)
                try expand(length)
                builder.source(.data, start..<start + length)
            case 0x5:
                // ASCII: its bytes are its UTF-8 (checked), referred to where they are.
                let (length, start) = try length(marker: marker, at: at)
                _ = try string(marker: marker, at: at)
                builder.source(.string, start..<start + length, isKey: asKey)
            case 0x6:
                let text = try string(marker: marker, at: at)
                if asKey { builder.key(text) } else { builder.string(text) }
            case 0xA, 0xD:
                let (length, start) = try length(marker: marker, at: at)
                let isDictionary = marker >> 4 == 0xD
                try fits(start, isDictionary ? 2 * length : length, referenceSize)
                try expand(isDictionary ? 2 * length * 16 : length * 16) // a value's own size in memory
                guard open.insert(object).inserted else { throw Self.fail("object \(object) contains itself") }
                defer { open.remove(object) }
                func reference(_ index: Int) throws -> Int {
                    let raw = try unsigned(at: start + index * referenceSize, size: referenceSize)
                    guard raw < UInt64(count) else { throw Self.fail("a reference to object \(raw) of \(count)") }
                    return Int(raw)
                }
                builder.begin(dictionary: isDictionary)
                if !isDictionary {
                    for index in 0..<length { try value(try reference(index), depth: depth + 1, into: &builder) }
                } else {
                    // Keys compared as bytes (their scalars): NFC and NFD twins are two keys.
                    var keys = Set<[UInt8]>()
                    for index in 0..<length {
                        let key = try reference(index)
                        let text = try string(marker: bytes[try offset(of: key)], at: try offset(of: key), key: true)
                        guard keys.insert(Array(text.utf8)).inserted else { throw Self.fail("the key \"\(text)\" appears twice in one dictionary") }
                        try value(key, depth: depth + 1, into: &builder, asKey: true)
                        try value(try reference(length + index), depth: depth + 1, into: &builder)
                    }
                }
                builder.end()
            default:
                throw Self.fail("marker 0x\(String(marker, radix: 16)) (sets, UIDs and other archiver types are not property list values here)")
            }
        }

        /// The text of an ASCII (0x5) or UTF-16 (0x6) string object at `at` (counted against
        /// the expansion bound unless it is a `key` read once more to check it is not repeated).
        mutating func string(marker: UInt8, at: Int, key: Bool = false) throws -> String {
            guard marker >> 4 == 0x5 || marker >> 4 == 0x6 else { throw Self.fail("a dictionary key that is not a string") }
            let (length, start) = try length(marker: marker, at: at)
            switch marker >> 4 {
            case 0x5:
                try fits(start, length, 1)
                if !key { try expand(length) }
                let slice = bytes[start..<start + length]
                guard slice.allSatisfy({ $0 < 0x80 }) else { throw Self.fail("an ASCII string with a byte above 0x7F") }
                return String(decoding: slice, as: UTF8.self)
            case 0x6:
                try fits(start, length, 2)
                if !key { try expand(2 * length) }
                let units = (0..<length).map { UInt16(bytes[start + 2 * $0]) << 8 | UInt16(bytes[start + 2 * $0 + 1]) }
                var text = ""
                var iterator = units.makeIterator()
                var decoder = UTF16()
                loop: while true {
                    switch decoder.decode(&iterator) {
                    case .scalarValue(let scalar): text.unicodeScalars.append(scalar)
                    case .emptyInput: break loop
                    case .error: throw Self.fail("a UTF-16 string with a lone surrogate")
                    }
                }
                return text
            default:
                throw Self.fail("a dictionary key that is not a string")
            }
        }
    }
}
