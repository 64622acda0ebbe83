import Foundation

/// `.signet/manifest.json`: what a package contains (FORMAT.md §2).
///
/// It is written once, with sorted keys, and signed as bytes; a verifier checks the signature
/// over the stored bytes and only then parses them with ``parse(_:)``.
public struct Manifest: Sendable, Equatable {
    /// The format identifier this version of Signet writes and accepts.
    public static let format = "signet/1"

    /// One resource.
    public struct File: Sendable, Equatable {
        /// Relative `/`-separated path, valid per ``ResourcePath``.
        public var path: String
        /// Size in bytes.
        public var size: UInt64
        /// Lowercase hex SHA-256 of the content.
        public var sha256: String
        /// Permissions: executable files are 0755, others 0644.
        public var mode: FileMode

        /// Creates an entry.
        public init(path: String, size: UInt64, sha256: String, mode: FileMode) {
            self.path = path
            self.size = size
            self.sha256 = sha256
            self.mode = mode
        }
    }

    /// The two modes FORMAT.md allows.
    public enum FileMode: String, Sendable, Equatable, CaseIterable {
        /// Regular file.
        case regular = "0644"
        /// Executable file.
        case executable = "0755"

        /// The permission bits.
        public var permissions: UInt32 { self == .executable ? 0o755 : 0o644 }
    }

    /// The signature scheme of the manifest and every resource signature.
    public var algorithm: SignatureAlgorithm
    /// When the package was made.
    public var created: Timestamp
    /// After this time clients refuse the package; nil for never.
    public var expires: Timestamp?
    /// The resources, sorted by the bytes of their UTF-8 paths.
    public var files: [File]
    /// The signing key.
    public var keyID: KeyID
    /// The package name; `sequence` grows between releases with the same name.
    public var name: String
    /// Release counter used against rollback.
    public var sequence: UInt64
    /// Human version string.
    public var version: String

    /// Creates a manifest.
    public init(algorithm: SignatureAlgorithm, created: Timestamp, expires: Timestamp?, files: [File],
                keyID: KeyID, name: String, sequence: UInt64, version: String) {
        self.algorithm = algorithm
        self.created = created
        self.expires = expires
        self.files = files
        self.keyID = keyID
        self.name = name
        self.sequence = sequence
        self.version = version
    }

    // The JSON shape, keys as FORMAT.md spells them (reading only; ``encoded()`` writes it).
    private struct Document: Decodable {
        struct Entry: Decodable {
            let mode: String
            let path: String
            let sha256: String
            let size: UInt64
        }
        let algorithm: String
        let created: String
        let expires: String?
        let files: [Entry]
        let format: String
        let key_id: String
        let name: String
        let sequence: UInt64
        let version: String
    }

    /// The exact bytes to store and sign: UTF-8 JSON, sorted keys, two-space indentation, final newline.
    ///
    /// Written directly rather than through `JSONEncoder`, which builds a tree of boxed values
    /// (over 1 KiB per file) before it writes a byte; the output is byte-for-byte what
    /// `JSONEncoder` with `[.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]` makes (a test
    /// keeps the two equal), so packages stay reproducible across Signet versions.
    public func encoded() throws -> [UInt8] {
        // Sized up front (a file's entry is ~170 bytes plus its path) so the buffer is not regrown.
        var out = ManifestWriter(capacity: 512 + name.utf8.count + version.utf8.count + files.reduce(0) { $0 + 192 + $1.path.utf8.count })
        out.raw("{\n")
        out.field("algorithm", indent: 1) { $0.string(algorithm.id) }
        out.field("created", indent: 1) { $0.string(created.rfc3339) }
        out.field("expires", indent: 1) { writer in
            if let expires { writer.string(expires.rfc3339) } else { writer.raw("null") }
        }
        out.field("files", indent: 1) { writer in
            writer.raw("[\n")
            for (index, file) in files.enumerated() {
                if index > 0 { writer.raw(",\n") }
                writer.indent(2)
                writer.raw("{\n")
                writer.field("mode", indent: 3) { $0.string(file.mode.rawValue) }
                writer.field("path", indent: 3) { $0.string(file.path) }
                writer.field("sha256", indent: 3) { $0.string(file.sha256) }
                writer.field("size", indent: 3, last: true) { $0.raw(String(file.size)) }
                writer.indent(2)
                writer.raw("}")
            }
            writer.raw("\n")
            writer.indent(1)
            writer.raw("]")
        }
        out.field("format", indent: 1) { $0.string(Self.format) }
        out.field("key_id", indent: 1) { $0.string(keyID.hex) }
        out.field("name", indent: 1) { $0.string(name) }
        out.field("sequence", indent: 1) { $0.raw(String(sequence)) }
        out.field("version", indent: 1, last: true) { $0.string(version) }
        out.raw("}\n")
        return out.bytes
    }

    /// Parses manifest bytes strictly: strict JSON (no duplicate keys, whole numbers only; see
    /// `StrictJSON`), `signet/1`, every field present and well-formed, known
    /// algorithm, valid paths without duplicates (also after Unicode normalisation), `expires`
    /// not before `created`. Throws ``SignetError/Code/malformedManifest``.
    public static func parse(_ bytes: [UInt8], source: String? = nil) throws -> Manifest {
        let source = source ?? TreeLayout.manifest
        func malformed(_ reason: String) -> SignetError {
            SignetError(.malformedManifest, "\(source) is not a valid signet/1 manifest: \(reason)", entry: TreeLayout.manifest)
        }
        // Duplicate keys, fractions and other constructs parsers read differently are refused
        // before Foundation (which keeps the first of two duplicates) sees the bytes.
        do {
            try StrictJSON.check(bytes, integersOnly: true)
        } catch let refusal as StrictJSON.Refusal {
            throw malformed("it is not JSON as Signet accepts it: \(refusal)")
        }
        let document: Document
        do {
            document = try JSONDecoder().decode(Document.self, from: Data(bytes))
        } catch DecodingError.keyNotFound(let key, _) {
            throw malformed("the field \"\(key.stringValue)\" is missing")
        } catch DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context) {
            throw malformed("the field \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\" has the wrong type")
        } catch {
            throw malformed("it is not JSON")
        }
        guard document.format == format else { throw malformed("its format is \"\(document.format)\", not \"\(format)\"") }
        guard let algorithm = SignatureAlgorithm(id: document.algorithm) else { throw malformed("unknown algorithm \"\(document.algorithm)\"") }
        guard let created = Timestamp(rfc3339: document.created) else { throw malformed("\"created\" is not an RFC 3339 UTC time") }
        var expires: Timestamp? = nil
        if let text = document.expires {
            guard let value = Timestamp(rfc3339: text) else { throw malformed("\"expires\" is not an RFC 3339 UTC time") }
            guard value >= created else { throw malformed("it expires (\(text)) before it was created (\(document.created))") }
            expires = value
        }
        guard document.key_id.utf8.count == 64, document.key_id == document.key_id.lowercased(), let keyID = KeyID(document.key_id) else {
            throw malformed("\"key_id\" is not 64 lowercase hex characters")
        }
        guard !document.name.isEmpty else { throw malformed("\"name\" is empty") }
        var seen = Set<String>()
        var files: [File] = []
        files.reserveCapacity(document.files.count)
        for entry in document.files {
            if case .failure(let refusal) = ResourcePath.validateResource(entry.path) {
                throw malformed("file \"\(entry.path)\": \(refusal.reason)")
            }
            // Swift compares Strings by canonical equivalence, so NFC/NFD twins collide here.
            guard seen.insert(entry.path).inserted else { throw malformed("file \"\(entry.path)\" is listed twice (or twice after Unicode normalisation)") }
            // 64 lowercase hex digits, checked byte by byte (no copies: this runs once per file).
            guard entry.sha256.utf8.count == 64, entry.sha256.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
                throw malformed("file \"\(entry.path)\" has a sha256 that is not 64 lowercase hex characters")
            }
            guard let mode = FileMode(rawValue: entry.mode) else {
                throw malformed("file \"\(entry.path)\" has mode \"\(entry.mode)\"; only 0644 and 0755 are allowed")
            }
            files.append(File(path: entry.path, size: entry.size, sha256: entry.sha256, mode: mode))
        }
        return Manifest(algorithm: algorithm, created: created, expires: expires, files: files, keyID: keyID,
                        name: document.name, sequence: document.sequence, version: document.version)
    }
}

/// Appends the manifest's JSON: the layout and string escapes of Foundation's pretty-printed,
/// sorted-key output without escaped slashes.
private struct ManifestWriter {
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
            default: bytes.append(byte)   // UTF-8 passes through, as Foundation writes it
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
