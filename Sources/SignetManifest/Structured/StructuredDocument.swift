import SignetCore
import SignetCrypto
/// A parsed JSON document or property list in a compact form: one entry
/// per value in three flat arrays, in document order, and every string, number and data as a
/// range of bytes: of the document itself where its text is the value's (a JSON string without
/// escapes, a number already canonical, a binary list's ASCII string or data), else of a second
/// buffer that holds the decoded text. A 16 MiB document costs about nine bytes a value beside
/// the document, instead of a tree of boxed enums, dictionaries and `String`s (eleven times the
/// document). Values compare exactly as ``StructuredValue`` defines: strings and keys by their
/// Unicode scalars (their UTF-8 bytes), numbers by their exact value.
///
/// Layout: a container is followed by its children (a dictionary's as key, value, key, value…);
/// its `first` is the index after its last descendant, its `second` the number of its items
/// (a dictionary's pairs). A scalar's `first` and `second` are the start and length of its bytes
/// (text as UTF-8, a number as canonical text, a real or date as its 8-byte bit pattern,
/// big-endian); a boolean's `first` is 0 or 1.
package struct StructuredDocument {
    enum Kind: UInt8 {
        case null, bool, number, real, string, data, date, array, dictionary
    }

    /// Each value's ``Kind`` (its raw value), with ``inSource`` set when its bytes are the
    /// document's own.
    private(set) var kinds: [UInt8] = []
    private(set) var first: [UInt32] = []
    private(set) var second: [UInt32] = []
    /// The document's own bytes (JSON, binary property lists), kept while it is compared.
    private(set) var source: [UInt8] = []
    /// Text that is not the document's own bytes (decoded, canonical, or from XML).
    private(set) var bytes: [UInt8] = []
    private static let inSource: UInt8 = 0x80

    private func kind(_ index: Int) -> Kind { Kind(rawValue: kinds[index] & 0x0F)! }

    /// The document's value (index 0), or nil for an empty document.
    var root: Int? { kinds.isEmpty ? nil : 0 }

    // MARK: Building

    /// Appends values in document order; containers are opened and closed around their items.
    struct Builder {
        private(set) var document = StructuredDocument()
        /// Open containers, innermost last.
        private var open: [Int] = []

        init() {}

        /// A builder for a document of `size` bytes: its arrays reserved once for the most such
        /// a document can hold (a value for every two bytes; text no longer than the document,
        /// unless it refers to `source`, the document itself), so that they never grow by
        /// copying (an array that doubles holds its old and new storage at once); pages never
        /// written are not resident.
        init(reserving size: Int, source: [UInt8]? = nil) {
            let size = max(0, min(size, StructuredFormat.maximumSize))
            if let source { document.source = source } else { document.bytes.reserveCapacity(size) }
            document.kinds.reserveCapacity(size / 2 + 1)
            document.first.reserveCapacity(size / 2 + 1)
            document.second.reserveCapacity(size / 2 + 1)
        }

        /// A string, key, number (canonical text) or data whose bytes are `range` of the source.
        mutating func source(_ kind: Kind, _ range: Range<Int>, isKey: Bool = false) {
            node(kind, UInt32(truncatingIfNeeded: range.lowerBound), UInt32(truncatingIfNeeded: range.count), isKey: isKey, inSource: true)
        }

        /// Whether `range` of the source holds exactly `text`'s bytes (a number already canonical).
        func sourceHolds(_ range: Range<Int>, _ text: String) -> Bool {
            range.count == text.utf8.count && document.source[range].elementsEqual(text.utf8)
        }

        /// Whether `range` of the source holds a backslash (a JSON string with escapes).
        func sourceEscapes(_ range: Range<Int>) -> Bool { document.source[range].contains(UInt8(ascii: "\\")) }

        /// Whether every container was closed and one value made.
        var isComplete: Bool { open.isEmpty && !document.kinds.isEmpty }

        private mutating func node(_ kind: Kind, _ first: UInt32, _ second: UInt32, isKey: Bool = false, inSource: Bool = false) {
            if !isKey, let parent = open.last { document.second[parent] &+= 1 }
            document.kinds.append(kind.rawValue | (inSource ? StructuredDocument.inSource : 0))
            document.first.append(first)
            document.second.append(second)
        }

        private mutating func scalar(_ kind: Kind, _ bytes: some Collection<UInt8>, isKey: Bool = false) {
            let start = UInt32(truncatingIfNeeded: document.bytes.count)
            document.bytes.append(contentsOf: bytes)
            node(kind, start, UInt32(truncatingIfNeeded: bytes.count), isKey: isKey)
        }

        mutating func begin(dictionary: Bool) {
            node(dictionary ? .dictionary : .array, 0, 0)
            open.append(document.kinds.count - 1)
        }

        mutating func end() {
            guard let index = open.popLast() else { return }
            document.first[index] = UInt32(truncatingIfNeeded: document.kinds.count)
        }

        /// A dictionary's key: its value comes next.
        mutating func key(_ text: String) { scalar(.string, text.utf8, isKey: true) }
        mutating func null() { node(.null, 0, 0) }
        mutating func bool(_ value: Bool) { node(.bool, value ? 1 : 0, 0) }
        /// A number as ``StructuredValue/canonicalNumber(_:)`` writes it.
        mutating func number(_ canonical: String) { scalar(.number, canonical.utf8) }
        mutating func real(_ value: Double) { scalar(.real, Self.bigEndian(value.bitPattern)) }
        mutating func date(_ value: Double) { scalar(.date, Self.bigEndian(value.bitPattern)) }
        mutating func string(_ text: String) { scalar(.string, text.utf8) }
        mutating func data(_ bytes: some Collection<UInt8>) { scalar(.data, bytes) }

        private static func bigEndian(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) } }
    }

    /// The document holding `value` (tests, and values made in code).
    package init(_ value: StructuredValue) {
        var builder = Builder()
        func add(_ value: StructuredValue) {
            switch value {
            case .null: builder.null()
            case .bool(let flag): builder.bool(flag)
            case .number(let text): builder.number(text)
            case .real(let real): builder.real(real)
            case .string(let text): builder.string(text)
            case .data(let bytes): builder.data(bytes)
            case .date(let date): builder.date(date)
            case .array(let items):
                builder.begin(dictionary: false)
                items.forEach(add)
                builder.end()
            case .dictionary(let fields):
                builder.begin(dictionary: true)
                for key in fields.keys.sorted() {
                    builder.key(key.text)
                    add(fields[key]!)
                }
                builder.end()
            }
        }
        add(value)
        self = builder.document
    }

    private init() {}

    // MARK: Reading

    /// The bytes of scalar `index`.
    private func slice(_ index: Int) -> ArraySlice<UInt8> {
        let start = Int(first[index])
        return kinds[index] & Self.inSource != 0 ? source[start..<start + Int(second[index])] : bytes[start..<start + Int(second[index])]
    }

    private func double(_ index: Int) -> Double {
        Double(bitPattern: slice(index).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
    }

    private func text(_ index: Int) -> String { String(decoding: slice(index), as: UTF8.self) }

    /// The index after value `index` and all it holds.
    private func next(_ index: Int) -> Int {
        switch kind(index) {
        case .array, .dictionary: return Int(first[index])
        default: return index + 1
        }
    }

    /// The items of array `index`, in order.
    private func items(_ index: Int) -> [Int] {
        var result: [Int] = []
        result.reserveCapacity(Int(second[index]))
        var at = index + 1
        for _ in 0..<second[index] {
            result.append(at)
            at = next(at)
        }
        return result
    }

    /// The pairs of dictionary `index` (key and value indexes), in key order (by Unicode
    /// scalars, which is UTF-8 byte order).
    private func pairs(_ index: Int) -> [(key: Int, value: Int)] {
        var result: [(key: Int, value: Int)] = []
        result.reserveCapacity(Int(second[index]))
        var at = index + 1
        for _ in 0..<second[index] {
            result.append((at, at + 1))
            at = next(at + 1)
        }
        return result.sorted { slice($0.key).lexicographicallyPrecedes(slice($1.key)) }
    }

    /// The value of `index` as a tree (for small documents: tests, configuration files).
    func value(at index: Int) -> StructuredValue {
        switch kind(index) {
        case .null: return .null
        case .bool: return .bool(first[index] != 0)
        case .number: return .number(text(index))
        case .real: return .real(double(index))
        case .string: return .string(text(index))
        case .data: return .data(Array(slice(index)))
        case .date: return .date(double(index))
        case .array: return .array(items(index).map { value(at: $0) })
        case .dictionary:
            var fields: [StructuredValue.Key: StructuredValue] = [:]
            for pair in pairs(index) { fields[.init(text(pair.key))] = value(at: pair.value) }
            return .dictionary(fields)
        }
    }

    /// The whole document as a tree.
    package var value: StructuredValue { root.map { value(at: $0) } ?? .null }

    // MARK: Comparing

    /// Whether value `x` here and value `y` of `other` are the same, as ``StructuredValue``'s
    /// `==` has it.
    package func same(_ x: Int, as y: Int, in other: StructuredDocument) -> Bool {
        switch (kind(x), other.kind(y)) {
        case (.null, .null): return true
        case (.bool, .bool): return first[x] == other.first[y]
        case (.number, .number), (.string, .string), (.data, .data): return slice(x) == other.slice(y)
        case (.real, .real):
            let (a, b) = (double(x), other.double(y))
            return a == b || (a.isNaN && b.isNaN)
        case (.date, .date): return double(x) == other.double(y)
        case (.number, .real): return StructuredValue.number(text(x)) == .real(other.double(y))
        case (.real, .number): return StructuredValue.real(double(x)) == .number(other.text(y))
        case (.array, .array):
            guard second[x] == other.second[y] else { return false }
            return zip(items(x), other.items(y)).allSatisfy { same($0, as: $1, in: other) }
        case (.dictionary, .dictionary):
            guard second[x] == other.second[y] else { return false }
            return zip(pairs(x), other.pairs(y)).allSatisfy { slice($0.key) == other.slice($1.key) && same($0.value, as: $1.value, in: other) }
        default: return false
        }
    }

    /// Every difference from `old` to `new`, deepest first where both hold a container, in key
    /// order; each marked allowed when one of `allowed` covers it.
    package static func changes(from old: StructuredDocument, to new: StructuredDocument, allowed: [KeyPath]) -> [KeyChange] {
        var found: [KeyChange] = []
        func note(_ path: [String?], _ kind: KeyChange.Kind) {
            let keyPath = KeyPath(components: path)
            found.append(KeyChange(path: keyPath, kind: kind, allowed: allowed.contains { $0.covers(keyPath) }))
        }
        func walk(_ x: Int, _ y: Int, _ path: [String?]) {
            switch (old.kind(x), new.kind(y)) {
            case (.dictionary, .dictionary):
                // Both key lists in order: one merge.
                let a = old.pairs(x), b = new.pairs(y)
                var i = 0, j = 0
                while i < a.count || j < b.count {
                    if j == b.count || (i < a.count && old.slice(a[i].key).lexicographicallyPrecedes(new.slice(b[j].key))) {
                        note(path + [old.text(a[i].key)], .removed)
                        i += 1
                    } else if i == a.count || old.slice(a[i].key) != new.slice(b[j].key) {
                        note(path + [new.text(b[j].key)], .added)
                        j += 1
                    } else {
                        walk(a[i].value, b[j].value, path + [old.text(a[i].key)])
                        i += 1
                        j += 1
                    }
                }
            case (.array, .array):
                let a = old.items(x), b = new.items(y)
                for index in 0..<max(a.count, b.count) {
                    if index < a.count && index < b.count {
                        walk(a[index], b[index], path + [String(index)])
                    } else {
                        note(path + [String(index)], index < a.count ? .removed : .added)
                    }
                }
            default:
                if !old.same(x, as: y, in: new) { note(path, .changed) }
            }
        }
        switch (old.root, new.root) {
        case (let x?, let y?): walk(x, y, [])
        case (nil, nil): break
        default: note([], .changed)
        }
        return found
    }

    /// Whether `pattern` names at least one value of this document.
    package func contains(_ pattern: KeyPath) -> Bool {
        func walk(_ index: Int, _ rest: ArraySlice<String?>) -> Bool {
            guard let component = rest.first else { return true }
            switch kind(index) {
            case .dictionary:
                let wanted = component.map { Array($0.utf8) }
                return pairs(index).contains { pair in (wanted == nil || slice(pair.key).elementsEqual(wanted!)) && walk(pair.value, rest.dropFirst()) }
            case .array:
                let all = items(index)
                if let component {
                    guard let position = Int(component), String(position) == component, all.indices.contains(position) else { return false }
                    return walk(all[position], rest.dropFirst())
                }
                return all.contains { walk($0, rest.dropFirst()) }
            default:
                return false
            }
        }
        return root.map { walk($0, pattern.components[...]) } ?? false
    }
}
