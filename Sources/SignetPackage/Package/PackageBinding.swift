import Foundation
public import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive

/// The package signed metadata names (a TUF target's `custom.signet`, FORMAT.md §7): what an
/// install binds the package it reads to before any resource is read or fetched.
///
/// Once the manifest verified, its SHA-256, name and sequence must be these (`.indexMismatch`,
/// exit 1, otherwise); a package downloaded whole must also have this size and SHA-256, and a
/// server that sends more than `size` bytes is stopped at the first byte over.
public struct PackageBinding: Sendable, Equatable {
    public let name: String
    public let version: String
    public let sequence: UInt64
    /// The package file's size in bytes.
    public let size: UInt64
    /// The SHA-256 of the whole package file (lowercase hex).
    public let sha256: String
    /// The SHA-256 of the signed manifest's bytes (lowercase hex).
    public let manifestSHA256: String

    public init(name: String, version: String, sequence: UInt64, size: UInt64, sha256: String, manifestSHA256: String) {
        self.name = name
        self.version = version
        self.sequence = sequence
        self.size = size
        self.sha256 = sha256
        self.manifestSHA256 = manifestSHA256
    }

    /// Describes the package file at `path`: its manifest's name, version and sequence, the
    /// SHA-256 of the manifest's bytes, and the file's size and SHA-256 (what a publisher lists).
    /// A bare package has no manifest to bind and is refused (`.packageInvalid`).
    public static func describing(_ path: String, limits: PackageLimits = PackageLimits()) throws -> PackageBinding {
        try describing(path, decryptionKey: nil, limits: limits)
    }

    /// ``describing(_:limits:)-(String,_)`` of a package that may be encrypted (FORMAT.md §8):
    /// the manifest is read inside it through `decryptionKey`, one of its recipients' keys;
    /// the size and SHA-256 are the encrypted file's, which is what a server sends. An
    /// encrypted package without a key is refused (`.notARecipient`).
    public static func describing(_ path: String, decryptionKey: DecryptionKey?, limits: PackageLimits = PackageLimits()) throws -> PackageBinding {
        var reader = try ZipReader(path: path, maximumEntries: limits.maximumEntries)
        if EncryptedPackage.isEncrypted(reader) {
            guard let decryptionKey else {
                throw SignetError(
                    .notARecipient,
                    "'\(path)' is encrypted: the manifest it is listed by is inside it, so give the key of one of its recipients with --decryption-key (a publisher's own certificate among its recipients)",
                    path: path)
            }
            reader = try ZipReader(input: try EncryptedPackage.input(path, with: decryptionKey), maximumEntries: limits.maximumEntries)
        }
        let layout = try PackageReader.Layout(reader: reader, limits: limits)
        guard let entry = layout.manifest else {
            throw SignetError(.packageInvalid, "'\(path)' has no signed manifest (a bare package): signed metadata binds a manifest", path: path)
        }
        let bytes = try reader.readAll(entry, limit: limits.maxManifestSize, name: TreeLayout.manifest)
        let manifest = try Manifest.parse(bytes)
        let whole = try Digest.compute(fileAt: path, algorithm: .sha256)
        let size = try InputFile.open(path, what: "package").size
        return PackageBinding(
            name: manifest.name, version: manifest.version, sequence: manifest.sequence, size: UInt64(size),
            sha256: whole.hex, manifestSHA256: try Digest.compute(bytes, algorithm: .sha256).hex)
    }

    /// ``describing(_:limits:)-(String,_)`` with a `FilePath`.
    public static func describing(_ path: FilePath, limits: PackageLimits = PackageLimits()) throws -> PackageBinding {
        try describing(path.string, limits: limits)
    }

    /// Channel names: 1 to 64 of `A-Z a-z 0-9 . _ -` (they name trust folders and state entries).
    public static func isValidChannel(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy { byte in
                (0x30...0x39).contains(byte) || (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) || byte == 0x2e || byte == 0x5f || byte == 0x2d
            } && name != "." && name != ".."
    }
}
