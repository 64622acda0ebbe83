import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SignetCore
import SignetCrypto

/// `.signet/manifest.json`: what a package contains (FORMAT.md §2).
///
/// It is written once, with sorted keys, and signed as bytes; a verifier checks the signature
/// over the stored bytes and only then parses them with ``parse(_:source:)``.
public struct Manifest: Sendable, Equatable {
    /// The format identifier this version of Signet writes and accepts.
    public static let format = "signet/1"

    /// One resource.
    public struct File: Sendable, Equatable {
        /// Relative `/`-separated path, valid per ``/SignetCore/ResourcePath``.
        public var path: String
        /// Size in bytes.
        public var size: UInt64
        /// Lowercase hex SHA-256 of the content.
        public var sha256: String {
            get { content.hex }
            set { content = ContentHash(newValue) }
        }
        /// Permissions: executable files are 0755, others 0644.
        public var mode: FileMode
        /// Set for a resource packed with `--structured`: it is compared key by key when its
        /// bytes differ from the signed ones (FORMAT.md §2, "Structured resources").
        public var structured: StructuredFormat?
        /// The SHA-256, held as its 32 bytes (a manifest of 50,000 files keeps 50,000 of these).
        package var content: ContentHash
        /// The content-defined chunks of a large resource (FORMAT.md §2, "Chunk indexes").
        package var chunks: ChunkIndex? = nil
        /// For a chunked resource stored deflated: its segments in the deflate stream (FORMAT.md
        /// §2, `deflate`).
        package var deflate: DeflateIndex? = nil
        /// For a chunked resource of a package with a chunk-index entry: where its indexes are
        /// in it (FORMAT.md §2, "The chunk-index entry"). ``chunks`` is then nil until
        /// read from the entry.
        package var indexed: IndexedChunks? = nil

        /// The file's fs-verity digest (SHA-256, 4 KiB blocks, no salt: ``VerityDigest``), for
        /// packages made with `pack --verity` (FORMAT.md §2, `verity`).
        package var verity: ContentHash? = nil

        /// Whether the resource has a chunk index, inline or in the entry.
        package var isChunked: Bool { chunks != nil || indexed != nil }

        /// Creates an entry.
        public init(path: String, size: UInt64, sha256: String, mode: FileMode, structured: StructuredFormat? = nil) {
            self.init(path: path, size: size, content: ContentHash(sha256), mode: mode, structured: structured)
        }

        init(path: String, size: UInt64, content: ContentHash, mode: FileMode, structured: StructuredFormat? = nil) {
            self.path = path
            self.size = size
            self.content = content
            self.mode = mode
            self.structured = structured
        }
    }

    /// A file's SHA-256 as 32 bytes when it is lowercase hex (always, in a parsed manifest), or
    /// as the text it was given otherwise (a bare package's files have none).
    package enum ContentHash: Sendable, Equatable {
        case bytes(UInt64, UInt64, UInt64, UInt64)
        case text(String)

        init(_ hex: String) {
            self = Self(lowercaseHex: hex) ?? .text(hex)
        }

        /// The 32 bytes of 64 lowercase hex digits; nil for anything else.
        package init?(lowercaseHex hex: String) {
            var hex = hex
            guard let words = hex.withUTF8({ Self.words(lowercaseHex: $0) }) else { return nil }
            self = .bytes(words.0, words.1, words.2, words.3)
        }

        private static func words(lowercaseHex text: UnsafeBufferPointer<UInt8>) -> (UInt64, UInt64, UInt64, UInt64)? {
            guard text.count == 64 else { return nil }
            // Without a branch per digit (random hex defeats branch prediction): each byte is
            // mapped to its value and any byte that is not a digit or a-f sets `invalid`; the
            // four words are independent chains the processor runs side by side.
            var invalid: UInt8 = 0
            @inline(__always) func nibble(_ byte: UInt8) -> UInt64 {
                let digit = byte &- 0x30
                let letter = byte &- 0x61
                let isDigit = digit < 10
                invalid |= (isDigit || letter < 6) ? 0 : 1
                return UInt64(isDigit ? digit : letter &+ 10)
            }
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            let base = text.baseAddress!
            for index in 0..<16 {
                words.0 = words.0 << 4 | nibble(base[index])
                words.1 = words.1 << 4 | nibble(base[16 + index])
                words.2 = words.2 << 4 | nibble(base[32 + index])
                words.3 = words.3 << 4 | nibble(base[48 + index])
            }
            return invalid == 0 ? words : nil
        }

        /// Lowercase hex.
        package var hex: String {
            switch self {
            case .text(let text): return text
            case .bytes(let a, let b, let c, let d):
                // Written in place: one allocation (unpack writes one per file into its metadata).
                return String(unsafeUninitializedCapacity: 64) { buffer in
                    func put(_ word: UInt64, at start: Int) {
                        for digit in 0..<16 {
                            let nibble = UInt8(truncatingIfNeeded: word >> UInt64(60 - 4 * digit)) & 0xf
                            buffer[start + digit] = nibble < 10 ? 0x30 + nibble : 0x57 + nibble
                        }
                    }
                    put(a, at: 0); put(b, at: 16); put(c, at: 32); put(d, at: 48)
                    return 64
                }
            }
        }

        /// The 32 bytes (nil for text that is not a SHA-256).
        package var bytes: [UInt8]? {
            guard case .bytes(let a, let b, let c, let d) = self else { return nil }
            return [a, b, c, d].flatMap { word in (0..<8).map { UInt8(truncatingIfNeeded: word >> UInt64(56 - 8 * $0)) } }
        }

        /// Whether `bytes` (a digest of 32 bytes) is this hash.
        package func matches(bytes other: [UInt8]) -> Bool {
            bytes == other
        }

        /// Whether `digest` is this SHA-256.
        package func matches(_ digest: Digest) -> Bool {
            guard case .bytes(let a, let b, let c, let d) = self, digest.bytes.count == 32 else { return false }
            return digest.bytes.withUnsafeBytes { raw in
                func word(_ index: Int) -> UInt64 { UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self)) }
                return word(0) == a && word(1) == b && word(2) == c && word(3) == d
            }
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
    /// The chunk-index entry's slice hashes, when the package has one (its chunked files are
    /// ``File/indexed``).
    package var chunkIndex: ChunkIndexEntry? = nil

    /// Creates a manifest.
    public init(
        algorithm: SignatureAlgorithm, created: Timestamp, expires: Timestamp?, files: [File],
        keyID: KeyID, name: String, sequence: UInt64, version: String
    ) {
        self.algorithm = algorithm
        self.created = created
        self.expires = expires
        self.files = files
        self.keyID = keyID
        self.name = name
        self.sequence = sequence
        self.version = version
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
        if let chunkIndex { out.field("chunk_index", indent: 1) { $0.string(chunkIndex.encoded) } }
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
                if let indexed = file.indexed {
                    writer.field("index", indent: 3) { $0.string(indexed.encoded) }
                } else if let chunks = file.chunks {
                    writer.field("blocks", indent: 3) { $0.string(chunks.encodedBlocks) }
                    writer.field("chunks", indent: 3) { $0.string(chunks.encoded) }
                    if let deflate = file.deflate { writer.field("deflate", indent: 3) { $0.string(deflate.encoded) } }
                }
                writer.field("mode", indent: 3) { $0.string(file.mode.rawValue) }
                writer.field("path", indent: 3) { $0.string(file.path) }
                writer.field("sha256", indent: 3) { $0.string(file.sha256) }
                writer.field("size", indent: 3, last: file.structured == nil && file.verity == nil) { $0.raw(String(file.size)) }
                if let structured = file.structured {
                    writer.field("structured", indent: 3, last: file.verity == nil) { $0.string(structured.rawValue) }
                }
                if let verity = file.verity {
                    writer.field("verity", indent: 3, last: true) { $0.string(verity.hex) }
                }
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
    /// not before `created`. Throws ``/SignetCore/SignetError/Code/malformedManifest``.
    ///
    /// Built as the strict parser walks the bytes (`ManifestReader`), with each file checked and
    /// kept compactly as it is met: no tree of the whole document is ever made, so a manifest of
    /// 50,000 files costs little more than its own bytes.
    /// How many times `"sha256"` occurs in `bytes`, at most one per 100 bytes: an upper bound
    /// of the entries a manifest of these bytes can hold.
    static func estimatedEntries(_ bytes: [UInt8]) -> Int {
        let key = Array("\"sha256\"".utf8)
        var count = 0
        bytes.withUnsafeBufferPointer { all in
            guard let base = all.baseAddress else { return }
            var at = 0
            // memchr to each quote, then the key's other bytes compared.
            while at + key.count <= all.count, let found = memchr(base + at, 0x22, all.count - at) {
                let index = UnsafeRawPointer(found) - UnsafeRawPointer(base)
                guard index + key.count <= all.count else { break }
                if memcmp(base + index, key, key.count) == 0 {
                    count += 1
                    at = index + key.count
                } else {
                    at = index + 1
                }
            }
        }
        // An entry takes at least 100 bytes ({"mode":"0644","path":"a","sha256":"<64 hex>",
        // "size":0}): never more than that many, whatever the bytes hold.
        return min(count, bytes.count / 100)
    }

    public static func parse(_ bytes: [UInt8], source: String? = nil) throws -> Manifest {
        let source = source ?? TreeLayout.manifest
        func malformed(_ reason: String) -> SignetError {
            SignetError(.malformedManifest, "\(source) is not a valid signet/1 manifest: \(reason)", entry: TreeLayout.manifest)
        }
        // Duplicate keys, fractions and other constructs parsers read differently are refused.
        var reader = ManifestReader()
        // Sized once from a count of the entries' "sha256" keys (an upper bound: the key may
        // also occur inside a path), instead of doubling: growth holds the old and the new
        // buffer at once, 7.8 MiB instead of 4 at 50,000 files.
        reader.files.reserveCapacity(Self.estimatedEntries(bytes))
        do {
            try StrictJSON.parse(bytes, integersOnly: true, into: &reader)
        } catch let refusal as StrictJSON.Refusal {
            throw malformed("it is not JSON as Signet accepts it: \(refusal)")
        } catch let failure as ManifestReader.Failure {
            // A document of another format may be shaped differently: name its format first.
            if let format = reader.fields["format"], case .string(let text) = format, text != Self.format {
                throw malformed("its format is \"\(text)\", not \"\(Self.format)\"")
            }
            throw malformed(failure.reason)
        }
        func string(_ key: String) throws -> String {
            switch reader.fields[key] {
            case .string(let text)?: return text
            case nil: throw malformed("the field \"\(key)\" is missing")
            default: throw malformed("the field \"\(key)\" has the wrong type")
            }
        }
        func number(_ key: String) throws -> UInt64 {
            switch reader.fields[key] {
            case .number(let text)?:
                guard let value = UInt64(text) else { throw malformed("the field \"\(key)\" is not a whole number from 0 to \(UInt64.max)") }
                return value
            case nil: throw malformed("the field \"\(key)\" is missing")
            default: throw malformed("the field \"\(key)\" has the wrong type")
            }
        }
        let format = try string("format")
        guard format == Self.format else { throw malformed("its format is \"\(format)\", not \"\(Self.format)\"") }
        if let failure = reader.fileFailure { throw malformed(failure.reason) }
        guard reader.sawFiles else { throw malformed("the field \"files\" is missing") }
        let algorithmID = try string("algorithm")
        guard let algorithm = SignatureAlgorithm(id: algorithmID) else { throw malformed("unknown algorithm \"\(algorithmID)\"") }
        let createdText = try string("created")
        guard let created = Timestamp(rfc3339: createdText) else { throw malformed("\"created\" is not an RFC 3339 UTC time") }
        var expires: Timestamp? = nil
        switch reader.fields["expires"] {
        case .null?: break
        case .string(let text)?:
            guard let value = Timestamp(rfc3339: text) else { throw malformed("\"expires\" is not an RFC 3339 UTC time") }
            guard value >= created else { throw malformed("it expires (\(text)) before it was created (\(createdText))") }
            expires = value
        case nil: throw malformed("the field \"expires\" is missing")
        default: throw malformed("the field \"expires\" has the wrong type")
        }
        let keyText = try string("key_id")
        guard keyText.utf8.count == 64, keyText == keyText.lowercased(), let keyID = KeyID(keyText) else {
            throw malformed("\"key_id\" is not 64 lowercase hex characters")
        }
        let name = try string("name")
        guard !name.isEmpty else { throw malformed("\"name\" is empty") }
        var manifest = Manifest(
            algorithm: algorithm, created: created, expires: expires, files: reader.files, keyID: keyID,
            name: name, sequence: try number("sequence"), version: try string("version"))
        // The chunk-index entry: declared exactly when a file is indexed in it, its slice hashes
        // one per slice of the size the files' sections add up to.
        let indexed = manifest.files.contains { $0.indexed != nil }
        switch reader.fields["chunk_index"] {
        case nil:
            guard !indexed else { throw malformed("files are indexed in a chunk-index entry, but \"chunk_index\" is missing") }
        case .string(let text)?:
            guard indexed else { throw malformed("\"chunk_index\" is set, but no file is indexed in it") }
            guard let size = ChunkIndexEntry.layOut(&manifest.files) else { throw malformed("its chunk-index sections add up to more than 2^64 bytes") }
            do {
                manifest.chunkIndex = try ChunkIndexEntry(parsing: text, size: size)
            } catch let refusal as ChunkIndex.Refused {
                throw malformed("it has \(refusal.reason)")
            }
        default: throw malformed("the field \"chunk_index\" has the wrong type")
        }
        return manifest
    }
}

extension Manifest {
    /// Package names are compared byte for byte: canonically equivalent spellings are different
    /// products.
    package static func sameName(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case (let a?, let b?): return a.utf8.elementsEqual(b.utf8)
        default: return false
        }
    }
}
