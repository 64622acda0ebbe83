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

    // The JSON shape, keys as FORMAT.md spells them.
    private struct Document: Codable {
        struct Entry: Codable {
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

        func encode(to encoder: Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(algorithm, forKey: .algorithm)
            try container.encode(created, forKey: .created)
            // FORMAT.md shows "expires": null rather than leaving the key out.
            if let expires { try container.encode(expires, forKey: .expires) } else { try container.encodeNil(forKey: .expires) }
            try container.encode(files, forKey: .files)
            try container.encode(format, forKey: .format)
            try container.encode(key_id, forKey: .key_id)
            try container.encode(name, forKey: .name)
            try container.encode(sequence, forKey: .sequence)
            try container.encode(version, forKey: .version)
        }
    }

    /// The exact bytes to store and sign: UTF-8 JSON, sorted keys, two-space indentation, final newline.
    public func encoded() throws -> [UInt8] {
        let document = Document(
            algorithm: algorithm.id, created: created.rfc3339, expires: expires?.rfc3339,
            files: files.map { .init(mode: $0.mode.rawValue, path: $0.path, sha256: $0.sha256, size: $0.size) },
            format: Self.format, key_id: keyID.hex, name: name, sequence: sequence, version: version)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        return Array(try encoder.encode(document)) + [UInt8(ascii: "\n")]
    }

    /// Parses manifest bytes strictly: `signet/1`, every field present and well-formed, known
    /// algorithm, valid paths without duplicates (also after Unicode normalisation), `expires`
    /// not before `created`. Throws ``SignetError/Code/malformedManifest``.
    public static func parse(_ bytes: [UInt8], source: String = ".signet/manifest.json") throws -> Manifest {
        func malformed(_ reason: String) -> SignetError {
            SignetError(.malformedManifest, "\(source) is not a valid signet/1 manifest: \(reason)", entry: ".signet/manifest.json")
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
            if case .failure(let refusal) = ResourcePath.validate(entry.path) {
                throw malformed("file \"\(entry.path)\": \(refusal.reason)")
            }
            // Swift compares Strings by canonical equivalence, so NFC/NFD twins collide here.
            guard seen.insert(entry.path).inserted else { throw malformed("file \"\(entry.path)\" is listed twice (or twice after Unicode normalisation)") }
            guard entry.sha256.utf8.count == 64, entry.sha256 == entry.sha256.lowercased(), [UInt8](hex: entry.sha256) != nil else {
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
