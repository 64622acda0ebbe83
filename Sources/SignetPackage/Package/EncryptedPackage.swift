#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetCrypto
import SignetArchive
import SignetManifest

/// An encrypted package (FORMAT.md §8): a zip of two stored entries — the signed package,
/// sealed whole as one c2sp.org/chunked-encryption message under a random package key
/// (`signet-encrypted/payload`), and a CMS envelope giving that key to each recipient
/// certificate (`signet-encrypted/envelope.der`, last, so that re-sealing to other devices
/// changes nothing before it). Signed, then encrypted: what a device decrypts is verified as
/// any package is.
public enum EncryptedPackage {
    package static let payloadName = "signet-encrypted/payload"
    package static let envelopeName = "signet-encrypted/envelope.der"
    /// The chunked encryption's context: the payload's entry name.
    static let context = Array(payloadName.utf8)
    /// The sealed document's format.
    static let sealedFormat = "signet-sealed/1"
    static let cipherName = "c2sp-chunked-v1-aes-256-gcm-hkdf-sha256"

    /// What an encrypted package says of itself without a key.
    public struct Summary: Sendable, Equatable {
        /// "AuthEnvelopedData" (AES-256-GCM) or "EnvelopedData" (AES-256-CBC).
        public let envelope: String
        /// The recipients' identifiers (issuer and serial number, or key id).
        public let recipients: [String]
        /// The encrypted payload's size, and the signed package's inside it.
        public let payloadSize: UInt64
        public let packageSize: UInt64
    }

    /// The two entries of an encrypted package, checked: both stored, named as above, nothing else.
    struct Parts {
        let reader: ZipReader
        let payload: Range<UInt64>
        let envelope: [UInt8]
        let packageSize: UInt64
    }

    /// Whether `path` is an encrypted package (it names the envelope entry).
    public static func isEncrypted(_ path: String) -> Bool {
        guard let reader = try? ZipReader(path: path, maximumEntries: 16) else { return false }
        return isEncrypted(reader)
    }

    /// Whether the archive `reader` has open is an encrypted package (an install that opened
    /// it already asks this, rather than opening it again).
    package static func isEncrypted(_ reader: ZipReader) -> Bool {
        reader.count <= 16 && reader.entries().contains { String(decoding: reader.rawName(of: $0), as: UTF8.self) == envelopeName }
    }

    static func parts(of path: String) throws -> Parts {
        // Local headers checked as each entry is read (which gives each entry its span, for
        // reading the payload by offset).
        try parts(of: try ZipReader(input: try InputFile.open(path, what: "package"), maximumEntries: 16, localHeaders: .deferred), name: path)
    }

    /// The parts of the encrypted package `reader` has open (with deferred local headers).
    static func parts(of reader: ZipReader, name path: String) throws -> Parts {
        var payload: Range<UInt64>?, envelope: [UInt8]?
        for entry in reader.entries() {
            let name = String(decoding: reader.rawName(of: entry), as: UTF8.self)
            switch name {
            case payloadName where payload == nil:
                guard let data = try reader.storedData(of: entry) else {
                    throw SignetError(.malformedArchive, "'\(path)': the encrypted payload is not a stored entry", path: path)
                }
                payload = data
            case envelopeName where envelope == nil:
                guard try reader.storedData(of: entry) != nil else {
                    throw SignetError(.malformedArchive, "'\(path)': the envelope is not a stored entry", path: path)
                }
                envelope = try reader.readAll(entry, limit: UInt64(CMSEnvelope.maximumSize), name: name)
            default:
                throw SignetError(.malformedArchive, "'\(path)' holds '\(name)', which an encrypted package does not", path: path)
            }
        }
        guard let payload, let envelope else {
            throw SignetError(.malformedArchive, "'\(path)' is not an encrypted package: it lacks \(payload == nil ? payloadName : envelopeName)", path: path)
        }
        guard let size = ChunkedEncryption.plaintextSize(sealed: UInt64(payload.count)) else {
            throw SignetError(.packageInvalid, "'\(path)': the encrypted payload is cut short or padded (\(payload.count) bytes)", path: path)
        }
        return Parts(reader: reader, payload: payload, envelope: envelope, packageSize: size)
    }

    /// Reads the envelope's structure and the sizes, without a key.
    public static func summary(of path: String) throws -> Summary {
        let parts = try parts(of: path)
        let envelope = try CMSEnvelope.summary(of: parts.envelope, name: path)
        return Summary(envelope: envelope.kind, recipients: envelope.recipients, payloadSize: UInt64(parts.payload.count), packageSize: parts.packageSize)
    }

    /// The package key the envelope holds for `key` (`not-a-recipient`, exit 3, otherwise).
    static func packageKey(_ envelope: [UInt8], with key: DecryptionKey, name: String) throws -> [UInt8] {
        let sealed = try CMSEnvelope.open(envelope, with: key, name: name)
        guard sealed.count <= 4096, let document = try? JSONSerialization.jsonObject(with: Data(sealed)) as? [String: Any],
            document["format"] as? String == sealedFormat, document["cipher"] as? String == cipherName,
            let encoded = document["key"] as? String, let bytes = Data(base64Encoded: encoded), bytes.count == ChunkedEncryption.keySize,
            document.count == 3
        else {
            throw SignetError(.malformedArchive, "'\(name)': the envelope's content is not a \(sealedFormat) document", path: name)
        }
        return [UInt8](bytes)
    }

    static func sealedDocument(key: [UInt8]) -> [UInt8] {
        // Keys sorted, no spaces: one spelling.
        Array("{\"cipher\":\"\(cipherName)\",\"format\":\"\(sealedFormat)\",\"key\":\"\(Data(key).base64EncodedString())\"}".utf8)
    }

    /// Seals the signed package `package` to `recipients` into `output` (which must not exist
    /// unless `replace`). The package is read once, as it is encrypted.
    public static func seal(
        _ package: String, to recipients: [RecipientCertificate], output: String, cipher: CMSEnvelope.Cipher = .aes256GCM,
        rsaPadding: CMSEnvelope.RSAPadding = .oaep, replace: Bool = false
    ) throws {
        try FileIdentity.refuseOverwriting(targets: [output], inputs: [(package, "package being encrypted")], what: "the encrypted package")
        if !replace { try AtomicFile.refuseExisting(output, what: "the encrypted package") }
        let key = try ChunkedEncryption.randomKey()
        let envelope = try CMSEnvelope.seal(sealedDocument(key: key), to: recipients, cipher: cipher, rsaPadding: rsaPadding)
        try write(package, key: key, envelope: envelope, output: output, replace: replace)
    }

    /// `pack --encrypt-to` sealing as it writes: a random package key, the envelope giving it
    /// to the recipients, and the output that seals what libzip writes.
    struct Sealing {
        let key: [UInt8]
        let envelope: [UInt8]
        let output: SealingOutput

        init(for options: PackOptions, output path: String, into archive: ArchiveOutput) throws {
            key = try ChunkedEncryption.randomKey()
            envelope = try CMSEnvelope.seal(sealedDocument(key: key), to: options.encryptTo, cipher: options.envelopeCipher, rsaPadding: options.rsaPadding)
            output = try SealingOutput(file: archive.rawDescriptor, path: path, key: key)
            archive.sink = output
        }

        /// Writes the encrypted package around its sealed payload; returns the signed package
        /// inside, read back through the key (for the checks any package gets before it is kept).
        func finish(_ temporary: String) throws -> any ArchiveInput {
            _ = try output.finish(envelope: envelope)
            return try DecryptingInput(try EncryptedPackage.parts(of: temporary), packageKey: key, name: temporary)
        }
    }

    /// Writes `package` sealed under `key`, with `envelope`, into `output`.
    private static func write(_ package: String, key: [UInt8], envelope: [UInt8], output: String, replace: Bool) throws {
        let source = try InputFile.open(package, what: "package", followSymlinks: false)
        let written = try PackageOutput(output, tag: "encrypt", what: "the encrypted package")
        let writer = try ZipWriter(writingTo: written.archive)
        try writer.add(payloadName, source: try SealingSource(file: source, key: key), compression: .store, permissions: 0o644)
        try writer.add(envelopeName, source: DeferredBytesSource { envelope }, compression: .store, permissions: 0o644)
        try writer.close()
        try written.commit(replace: replace, what: "the encrypted package")
    }

    /// Writes the signed package inside `encrypted` to `output`, a new file only its owner
    /// reads (each chunk authenticated as it is read): for a publisher re-signing a release.
    package static func decrypt(_ encrypted: String, with key: DecryptionKey, to output: String) throws {
        let input = try input(encrypted, with: key)
        let fd = open(output, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SignetError.posix(errno, "cannot create the decrypted package", path: output, call: "open") }
        let file = OwnedDescriptor(adopting: fd)
        var buffer = [UInt8](repeating: 0, count: InputFile.chunkSize)
        var offset: Int64 = 0
        while offset < input.size {
            let count = try buffer.withUnsafeMutableBytes { try input.read(fullyAt: offset, into: $0) }
            guard count > 0 else { throw SignetError(.packageInvalid, "'\(encrypted)': the encrypted payload ends early", path: encrypted) }
            do {
                try buffer.withUnsafeBytes { try file.descriptor.write(all: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            } catch let failure as SystemCallFailure {
                throw SignetError.posix(failure, "cannot write the decrypted package", path: output)
            }
            offset += Int64(count)
        }
    }

    /// Seals `package` as `encrypted` is sealed: under the same package key (recovered with
    /// `key`, one of its recipients') and with the same envelope, so that every device that
    /// could read `encrypted` reads `output` (a re-signed release of it).
    package static func seal(_ package: String, like encrypted: String, with key: DecryptionKey, output: String, replace: Bool = false) throws {
        let parts = try parts(of: encrypted)
        let packageKey = try packageKey(parts.envelope, with: key, name: encrypted)
        if !replace { try AtomicFile.refuseExisting(output, what: "the encrypted package") }
        try write(package, key: packageKey, envelope: parts.envelope, output: output, replace: replace)
    }

    /// Seals an encrypted package to other recipients: a new envelope for the same package key
    /// (recovered with `key`, one of the present recipients'); the payload is copied byte for
    /// byte, so packages for different sets of devices differ only in their envelopes.
    public static func reseal(
        _ encrypted: String, with key: DecryptionKey, to recipients: [RecipientCertificate], output: String,
        cipher: CMSEnvelope.Cipher = .aes256GCM, rsaPadding: CMSEnvelope.RSAPadding = .oaep, replace: Bool = false
    ) throws {
        try FileIdentity.refuseOverwriting(targets: [output], inputs: [(encrypted, "package being re-sealed")], what: "the re-sealed package")
        if !replace { try AtomicFile.refuseExisting(output, what: "the re-sealed package") }
        let parts = try parts(of: encrypted)
        let packageKey = try packageKey(parts.envelope, with: key, name: encrypted)
        let envelope = try CMSEnvelope.seal(sealedDocument(key: packageKey), to: recipients, cipher: cipher, rsaPadding: rsaPadding)
        let source = try InputFile.open(encrypted, what: "package", followSymlinks: false)
        let payloadEntry = parts.reader.entries().first { String(decoding: parts.reader.rawName(of: $0), as: UTF8.self) == payloadName }!
        let record = parts.reader.record(of: payloadEntry)
        let written = try PackageOutput(output, tag: "reseal", what: "the re-sealed package")
        let writer = try ZipWriter(writingTo: written.archive)
        try writer.add(
            payloadName,
            source: CopiedDeflateSource(
                file: source, localHeaderOffset: record.localHeaderOffset, compressedSize: record.compressedSize, crc: record.crc, size: record.size,
                stored: true),
            compression: .store, permissions: 0o644)
        try writer.add(envelopeName, source: DeferredBytesSource { envelope }, compression: .store, permissions: 0o644)
        try writer.close()
        try written.commit(replace: replace, what: "the re-sealed package")
    }

    /// The signed package inside `encrypted`, read in place through `key` (its envelope opened,
    /// the payload's commitment checked): an input the archive layer reads as any package,
    /// each chunk authenticated as it is read, nothing decrypted written anywhere.
    package static func input(_ encrypted: String, with key: DecryptionKey) throws -> any ArchiveInput {
        let parts = try parts(of: encrypted)
        return try DecryptingInput(parts, packageKey: try packageKey(parts.envelope, with: key, name: encrypted), name: encrypted)
    }

    /// ``input(_:with:)`` for an encrypted package on a server, `outer` reading it through
    /// `ranged` (with deferred local headers): what the archive layer plans on the signed
    /// package becomes requests for the records that hold it. The envelope, the payload's
    /// header and its last records (the signed package's end records and, for most packages,
    /// its directory) are asked for first, in one request where the server answers several
    /// ranges.
    package static func rangedInput(_ outer: ZipReader, ranged: any PlannedInput, with key: DecryptionKey) throws -> any PlannedInput {
        var first: [Range<Int64>] = []
        // The records that hold the signed package's last 65,557 bytes, wherever its records
        // start: at most that and one chunk, with the tags of six records.
        let tail = Int64(22 + 65_535 + ChunkedEncryption.chunkSize - 1 + 6 * ChunkedEncryption.tagSize)
        for entry in outer.entries() {
            guard let span = outer.span(of: entry).map({ Int64($0.lowerBound)..<Int64($0.upperBound) }) else { continue }
            if String(decoding: outer.rawName(of: entry), as: UTF8.self) == payloadName {
                first += [span.lowerBound..<min(span.upperBound, span.lowerBound + 1_024), max(span.lowerBound, span.upperBound - tail)..<span.upperBound]
            } else {
                first.append(span)
            }
        }
        ranged.plan(first, exactGap: RangedInput.partOverhead)
        let parts = try parts(of: outer, name: ranged.path)
        return try DecryptingInput(parts, packageKey: try packageKey(parts.envelope, with: key, name: ranged.path), name: ranged.path, ranged: ranged)
    }
}

/// The payload entry's bytes: the package file sealed as it is read (one chunk held).
final class SealingSource: ZipEntrySource {
    private let file: InputFile
    private let key: [UInt8]
    private var sealer: ChunkedSealer?
    private var pending: [UInt8] = []
    private var pendingOffset = 0
    private var chunk = [UInt8](repeating: 0, count: InputFile.chunkSize)
    private var position: Int64 = 0
    private var finished = false

    init(file: InputFile, key: [UInt8]) throws {
        self.file = file
        self.key = key
    }

    func size() throws -> UInt64 {
        guard let size = ChunkedEncryption.sealedSize(plaintext: UInt64(file.size)) else {
            throw SignetError(.usage, "'\(file.path)' is too large to encrypt", path: file.path)
        }
        return size
    }

    func open() throws {
        let sealer = try ChunkedSealer(inputKey: key, context: EncryptedPackage.context)
        pending = sealer.header
        pendingOffset = 0
        self.sealer = sealer
        position = 0
        finished = false
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        while pendingOffset == pending.count && !finished {
            // One read buffer and one output buffer for the whole entry: no allocation per read.
            let n = try chunk.withUnsafeMutableBytes { try file.read(fullyAt: position, into: $0) }
            position += Int64(n)
            pending.removeAll(keepingCapacity: true)
            pendingOffset = 0
            if n > 0 { try sealer!.append(chunk[0..<n], into: &pending) }
            if n < chunk.count {
                guard position == file.size else { throw SignetError(.io, "'\(file.path)' changed while it was encrypted", path: file.path) }
                try sealer!.finish(into: &pending)
                finished = true
            }
        }
        let n = pending.copyBytes(from: pendingOffset, into: buffer)
        pendingOffset += n
        return n
    }

    func close() throws {}
}

extension PackageReader {
    /// ``contents(of:limits:)-(String,_)`` of the signed package inside an encrypted one (FORMAT.md §8),
    /// read in place through the device's key.
    public static func contents(of path: String, decryptionKey: DecryptionKey, limits: PackageLimits = PackageLimits()) throws -> PackageContents {
        try contents(of: try ZipReader(input: try EncryptedPackage.input(path, with: decryptionKey), maximumEntries: limits.maximumEntries), limits: limits)
    }

    /// ``verify(_:policy:limits:now:progress:)-(String,_,_,_,_)`` of the signed package inside an encrypted one,
    /// read in place through the device's key (each chunk authenticated as it is read).
    public static func verify(
        _ path: String, decryptionKey: DecryptionKey, policy: TrustPolicy, limits: PackageLimits = PackageLimits(),
        now: Timestamp = .now, progress handler: ProgressHandler? = nil
    ) throws -> PackageVerification {
        let reader = try ZipReader(input: try EncryptedPackage.input(path, with: decryptionKey), maximumEntries: limits.maximumEntries)
        return try verify(reader: reader, policy: policy, limits: limits, now: now, progress: handler)
    }
}
