#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive

/// A package signed again with another key, its resources untouched (FORMAT.md §2, "Re-signing";
/// as `rauc resign`): what a key rotation needs so that a listed release stays installable
/// without packing it again — the same name, version, sequence and files, byte for byte, so a
/// device's rollout bucket does not move and an installed tree keeps every file.
///
/// The package is verified whole first with `policy` (the key that signed it must be trusted:
/// a re-signature never vouches for bytes nobody checked). The new one has a new manifest (the
/// new key's id and algorithm, every other field as it was), manifest signature, per-file
/// signatures (over the SHA-256 digests the verified manifest states: nothing is read twice)
/// and signature-record signature, and the new key's certificate when it has one; each
/// resource's entry and the chunk-index entry are copied as they are (a deflate stream is not
/// compressed again). The result is verified with the new key before it replaces anything.
public enum PackageResigner {
    /// Re-signs `package` into `output` with `signer`. Throws `.untrustedSigner` or a
    /// verification failure when `package` does not verify with `policy`, `.usage` when the
    /// signer's algorithm signs another digest than SHA-256 or `output` exists (unless
    /// `replace`). Returns the new manifest.
    public static func resign(
        _ package: String, to output: String, signer: Signer, policy: TrustPolicy,
        limits: PackageLimits = PackageLimits(), replace: Bool = false, now: Timestamp = .now
    ) throws -> Manifest {
        guard signer.algorithm.digest == .sha256 else {
            throw SignetError(
                .usage,
                "re-signing signs the SHA-256 digests the manifest states; \(signer.algorithm.id) signs \(signer.algorithm.digest): pack the release again to use it"
            )
        }
        try FileIdentity.refuseOverwriting(targets: [output], inputs: [(package, "package being re-signed")], what: "the re-signed package")
        if !replace { try AtomicFile.refuseExisting(output, what: "the re-signed package") }
        let verification = try PackageReader.verify(package, policy: policy, limits: limits, now: now)
        if let failure = verification.failure {
            throw SignetError(SignetError.Code(failure), "'\(package)' does not verify, so it is not re-signed: \(verification.message)", path: package)
        }
        let reader = try ZipReader(path: package, maximumEntries: limits.maximumEntries)
        let layout = try PackageReader.Layout(reader: reader, limits: limits)
        guard case .checked(let checked) = try PackageReader.checkManifest(reader: reader, layout: layout, policy: policy, limits: limits, now: now) else {
            throw SignetError(.badSignature, "'\(package)' does not verify, so it is not re-signed", path: package)
        }
        var manifest = checked.manifest
        manifest.algorithm = signer.algorithm
        manifest.keyID = signer.key.keyID
        let manifestBytes = try manifest.encoded()
        let manifestSignature = try signer.sign(manifestBytes).bytes
        // Every file's signature over the digest the verified manifest states, on every core.
        let digests = try manifest.files.map { file -> Digest in
            guard let bytes = file.content.bytes, let digest = Digest(algorithm: .sha256, bytes: bytes) else {
                throw SignetError(.malformedManifest, "'\(file.path)' has no SHA-256 in the manifest", path: package)
            }
            return digest
        }
        let signatures = try parallelMap(digests) { digest in Result { try signer.sign(digest: digest).bytes } }.map { try $0.get() }
        let record = try Digest.Hasher(signer.algorithm.digest)
        SignatureRecord.header(length: signer.key.publicKey.signatureLength).withUnsafeBytes { record.update($0) }
        for signature in signatures { signature.withUnsafeBytes { record.update($0) } }
        let recordSignature = try signer.sign(digest: try record.finalize()).bytes
        let signatureOf = Dictionary(zip(manifest.files.map(\.path), signatures), uniquingKeysWith: { first, _ in first })
        let modes = Dictionary(manifest.files.map { ($0.path, $0.mode.permissions) }, uniquingKeysWith: { first, _ in first })

        let written = try PackageOutput(output, tag: "resign", what: "the re-signed package")
        let source = try InputFile.open(package, what: "package", followSymlinks: false)
        let writer = try ZipWriter(writingTo: written.archive)
        // The entries in the order the package has them: resources and the chunk index copied,
        // Signet's own entries made anew (the old signer's certificates left out).
        for entry in reader.entries() {
            let name = String(decoding: reader.rawName(of: entry), as: UTF8.self)
            let record = reader.record(of: entry)
            func copied() -> CopiedDeflateSource {
                CopiedDeflateSource(
                    file: source, localHeaderOffset: record.localHeaderOffset, compressedSize: record.compressedSize,
                    crc: record.crc, size: record.size, stored: record.method == 0)
            }
            if let mode = modes[name] {
                try writer.add(name, source: copied(), compression: record.method == 0 ? .store : .deflate(level: 6), permissions: mode)
            } else if name == TreeLayout.chunkIndex {
                try writer.add(name, source: copied(), compression: record.method == 0 ? .store : .deflate(level: 6), permissions: 0o644)
            } else if name == TreeLayout.manifest {
                try writer.add(name, source: DeferredBytesSource { manifestBytes }, compression: .deflate(level: 6), permissions: 0o644)
            } else if name == TreeLayout.manifestSignature {
                try writer.add(name, source: DeferredBytesSource { manifestSignature }, compression: .store, permissions: 0o644)
            } else if let resource = TreeLayout.resource(ofSignature: name), let signature = signatureOf[resource] {
                try writer.add(name, source: DeferredBytesSource { signature }, compression: .store, permissions: 0o644)
            } else if name == TreeLayout.signatureRecordSignature {
                continue
            } else if name.hasPrefix(TreeLayout.certificates + "/") || name.hasSuffix("/") {
                continue
            } else {
                throw SignetError(.malformedArchive, "'\(package)' holds '\(name)', which a signet/1 package does not: not re-signed", path: package)
            }
        }
        // Always written (a package made before the record's signature existed gets one).
        try writer.add(TreeLayout.signatureRecordSignature, source: DeferredBytesSource { recordSignature }, compression: .store, permissions: 0o644)
        if let certificate = signer.key.certificateDER {
            try writer.add(TreeLayout.signerCertificate, source: DeferredBytesSource { certificate }, compression: .store, permissions: 0o644)
        }
        try writer.close()
        // What a device will check, checked on the bytes written, with the new key alone.
        let check = try PackageReader.verify(written.temporary, policy: TrustPolicy(keys: [signer.key.publicKey]), limits: limits, now: now)
        guard check.isValid else {
            throw SignetError(.io, "the re-signed package does not verify with the new key (\(check.message)); nothing was written", path: output)
        }
        try written.commit(replace: replace, what: "the re-signed package")
        return manifest
    }
}
