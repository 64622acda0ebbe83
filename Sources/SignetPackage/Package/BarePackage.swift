import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive
/// A bare package (FORMAT.md §2): the older layout `openssl dgst` and `zip` alone make, each
/// file with `FILE.sig` beside it and no manifest. No completeness, rollback or expiry
/// guarantee comes with it; each file's signature is all there is.
/// It holds the open archive: not `Sendable`; use it on one thread at a time.
public struct BarePackage {
    /// One file of the package.
    public struct File: Sendable, Equatable {
        /// Its path.
        public let path: String
        /// Uncompressed size the archive claims.
        public let size: UInt64
        /// Compressed size.
        public let compressedSize: UInt64
        /// How the archive keeps it.
        public let compression: StorageMethod
        /// Whether `path.sig` is in the package.
        public let hasSignature: Bool
    }

    /// The package file.
    public let path: String
    /// The files in archive order (their `.sig` entries are not listed as files).
    public let files: [File]

    private let reader: ZipReader
    private let layout: PackageReader.Layout

    /// Reads the archive's structure and entry names with the same checks unpack `--bare`
    /// makes (limits, names, types, duplicates); reads no file content.
    public init(contentsOf path: String, limits: PackageLimits = PackageLimits()) throws {
        reader = try ZipReader(path: path, maximumEntries: limits.maximumEntries)
        layout = try PackageReader.Layout(reader: reader, limits: limits, bare: true)
        self.path = path
        files = layout.resourcePaths.map { [layout] name in
            let entry = layout.resource(name)!
            return File(
                path: name, size: entry.size, compressedSize: entry.compressedSize,
                compression: entry.method == ZipReader.methodStore ? .stored : .deflated,
                hasSignature: layout.signature(name) != nil)
        }
    }

    /// Verifies every file against its signature, streaming each, exactly as unpack `--bare`
    /// does before it writes anything, and returns the key that signed the first file.
    ///
    /// Throws ``/SignetCore/SignetError``: `.missingSignature`, `.badSignature`, `.wrongSignatureLength`
    /// (exit 1) or `.untrustedSigner` (exit 3) naming the file; archive errors (exit 4).
    public func verify(
        policy: TrustPolicy, algorithm: SignatureAlgorithm = .default, limits: PackageLimits = PackageLimits(),
        progress handler: ProgressHandler? = nil
    ) throws -> PublicKey {
        let progress = ProgressCounter.make(handler, items: files.count, bytes: files.reduce(0) { $0 &+ $1.size })
        var signer: PublicKey?
        for file in files {
            let (_, _, key) = try Self.verifyFile(
                file.path, reader: reader, layout: layout, policy: policy, algorithm: algorithm, limits: limits, package: path
            ) {
                progress?.add(bytes: $0.count)
            }
            signer = signer ?? key
            progress?.add(items: 1)
        }
        progress?.finish()
        guard let signer else { throw SignetError(.malformedArchive, "'\(path)' holds no files", path: path) }
        return signer
    }

    /// Streams one file of a bare package to `sink` while hashing it, then checks it against
    /// `path.sig`: what `verify` and unpack `--bare` run for every file. Returns its SHA-256
    /// (hex), the signature and the key that made it.
    package static func verifyFile(
        _ path: String, reader: ZipReader, layout: PackageReader.Layout, policy: TrustPolicy,
        algorithm: SignatureAlgorithm, limits: PackageLimits, package: String, sink: (UnsafeRawBufferPointer) throws -> Void
    ) throws -> (String, [UInt8], PublicKey) {
        guard let signatureEntry = layout.signature(path) else {
            throw SignetError(
                .missingSignature, "'\(path)' has no signature '\(path).sig' in the bare package '\(package)'; every file needs one", path: package, entry: path
            )
        }
        let entry = layout.resource(path)!
        let algorithms = algorithm.digest == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, algorithm.digest]
        let hashers = try algorithms.map { try Digest.Hasher($0) }
        try reader.read(entry, limit: limits.maxTotalSize, name: path) { chunk in
            hashers.forEach { $0.update(chunk) }
            try sink(chunk)
        }
        let digests = try hashers.map { try $0.finalize() }
        let signature = try reader.readAll(signatureEntry, limit: 64 * 1024, name: path + ".sig")
        let result = Verifier(policy: policy).verify(signature: signature, digest: digests.last!, algorithm: algorithm)
        guard let key = result.signer else {
            // The same verdict as `signet verify` gives: a signature only a refused key verifies is exit 3.
            let code: SignetError.Code =
                result.failure == .untrusted ? .untrustedSigner : result.failure == .wrongLength ? .wrongSignatureLength : .badSignature
            throw SignetError(code, "'\(path)' in '\(package)': \(result.message)", path: package, entry: path)
        }
        return (digests[0].hex, signature, key)
    }
}
