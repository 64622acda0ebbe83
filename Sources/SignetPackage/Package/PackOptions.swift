#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCore
import SignetManifest
import SignetCrypto

/// Options for ``PackageBuilder/pack(_:to:signer:options:)-(_,String,_,_)``.
public struct PackOptions: Sendable {
    /// How resources are compressed.
    public enum Compression: Sendable, Equatable {
        /// Deflate at `level` (1-9), except already-compressed types and data that deflate
        /// would not shrink, which are stored.
        case automatic(level: Int)
        /// Store everything.
        case store
    }

    /// The package name (`name` in the manifest).
    public var name: String
    /// The version string.
    public var version: String
    /// Release counter; nil for `SOURCE_DATE_EPOCH` or the current UNIX time.
    public var sequence: UInt64?
    /// Expiry; nil for none.
    public var expires: Timestamp?
    /// `created`; nil for `SOURCE_DATE_EPOCH` or now.
    public var created: Timestamp?
    /// Compression policy.
    public var compression: Compression
    /// Pack what symbolic links in the inputs point to instead of refusing them.
    public var followSymlinks: Bool
    /// The signer's X.509 certificate (DER), stored as `.signet/certs/signer.der`. Its key must
    /// be the signing key. Nil: a certificate that came with the key (PKCS#12), if any.
    public var certificate: [UInt8]? = nil
    /// Intermediate certificates (DER), leaf-most first, stored as `.signet/certs/chain-<n>.der`.
    public var chain: [[UInt8]] = []
    /// The limits the package is held to: those of the clients' unpack (default: unpack's
    /// defaults). A package beyond them is refused (`.usage`, naming the flag), never made.
    public var limits = PackageLimits()
    /// Files the package must never replace, besides the resources (the key, certificates):
    /// an output that is one of them (by device and inode) is refused.
    public var protecting: [String] = []
    /// Whether an existing file at the output is replaced (the CLI's `--force`); when false it
    /// is refused before anything is read (``/SignetCore/SignetError/Code/fileExists``).
    public var replace = true
    /// Glob patterns (`.gitignore`'s rules, as `reverify --exclude` reads them: FORMAT.md §4,
    /// "Patterns") of JSON and property list resources that are parsed now and recorded as
    /// structured, so that re-verification can compare them key by key.
    public var structured: [String] = []
    /// Glob patterns (`.gitignore`'s rules, as for ``structured``) of files and folders left out
    /// of the package, matched against package paths; an excluded folder is not walked.
    public var exclude: [String] = []
    /// Told how many files and bytes have been read and packed, from pack's threads.
    public var progress: ProgressHandler? = nil
    /// Resources of at least this many bytes get a chunk index (in the package's chunk-index
    /// entry; compressible ones are deflated in 8 KiB segments), so that an update can fetch
    /// only the chunks and blocks a device lacks (FORMAT.md §2, `index`); nil: none, which also
    /// makes packages Signet 0.1.0 installs. 4 MiB by default.
    public var chunkThreshold: UInt64? = PackOptions.defaultChunkThreshold
    /// Record each resource's fs-verity digest in the manifest (FORMAT.md §2, `verity`; issue
    /// 52), for devices that install with fs-verity.
    public var verity = false
    /// Device certificates to seal the package to (FORMAT.md §8): empty, a plain package; else
    /// the signed package is made beside the output and sealed into it, whole, under a random
    /// package key that a CMS envelope gives to each of them.
    public var encryptTo: [RecipientCertificate] = []
    /// The envelope's content cipher and how RSA devices receive the key.
    public var envelopeCipher: CMSEnvelope.Cipher = .aes256GCM
    public var rsaPadding: CMSEnvelope.RSAPadding = .oaep
    /// The default ``chunkThreshold``: 4 MiB.
    public static let defaultChunkThreshold: UInt64 = 4 << 20

    /// Creates options.
    public init(
        name: String, version: String, sequence: UInt64? = nil, expires: Timestamp? = nil, created: Timestamp? = nil,
        compression: Compression = .automatic(level: 6), followSymlinks: Bool = false
    ) {
        self.name = name
        self.version = version
        self.sequence = sequence
        self.expires = expires
        self.created = created
        self.compression = compression
        self.followSymlinks = followSymlinks
    }

    /// `SOURCE_DATE_EPOCH` from the environment, if set to a valid number of seconds that a
    /// manifest can express (up to 9999-12-31).
    public static var sourceDateEpoch: Timestamp? {
        guard let text = getenv("SOURCE_DATE_EPOCH").map({ String(cString: $0) }), let seconds = Int64(text), seconds >= 0,
            Timestamp.representable.contains(seconds)
        else { return nil }
        return Timestamp(secondsSinceEpoch: seconds)
    }

    /// Refuses a `SOURCE_DATE_EPOCH` that is set but unusable, rather than silently ignoring it
    /// (the package would not be reproducible) or writing a time no verifier can read.
    static func checkSourceDateEpoch() throws {
        guard let text = getenv("SOURCE_DATE_EPOCH").map({ String(cString: $0) }), !text.isEmpty, sourceDateEpoch == nil else { return }
        throw SignetError(
            .usage, "SOURCE_DATE_EPOCH is '\(text)'; it must be a whole number of seconds from 0 to \(Timestamp.representable.upperBound) (9999-12-31)")
    }
}
