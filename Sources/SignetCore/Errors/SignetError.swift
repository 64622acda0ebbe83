/// The one error type Signet throws.
///
/// `code` says what kind of failure it is and decides the process exit status (FORMAT.md §4);
/// `reason` is a sentence for a person that names the file and says what to do next.
/// Two errors are equal when their codes are equal.
public struct SignetError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, as an open set: new codes can be added without breaking callers.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// Stable identifier, as printed in `--json` output (`"wrong-passphrase"`).
        public let name: String
        /// The exit status FORMAT.md §4 assigns to this kind of failure.
        public let exitStatus: ExitStatus

        /// Creates a code. Internal: only the documented codes below exist (and those of
        /// verification verdicts, through ``init(_:)``).
        package init(_ name: String, exitStatus: ExitStatus) {
            self.name = name
            self.exitStatus = exitStatus
        }

        public var description: String { name }

        public static func == (lhs: Code, rhs: Code) -> Bool { lhs.name == rhs.name }
        public func hash(into hasher: inout Hasher) { hasher.combine(name) }

        // Exit 1: well-formed input that fails verification.
        /// No token or no key on it matches a PKCS#11 URI (or more than one does).
        public static let tokenObjectNotFound = Code("token-object-not-found", exitStatus: .malformed)
        /// A PKCS#11 module that cannot be found, loaded or initialised.
        public static let tokenModule = Code("token-module", exitStatus: .environment)

        /// A package is expired, incomplete, or its contents do not match its manifest.
        public static let packageInvalid = Code("package-invalid", exitStatus: .verificationFailed)
        /// A package would replace an installed tree of the same name with a lower sequence.
        public static let rollback = Code("rollback", exitStatus: .verificationFailed)
        /// A package of another name (another product) would replace an installed tree, or a
        /// destination the state file records for another package (`unpack --change-package`
        /// allows it).
        public static let otherPackage = Code("other-package", exitStatus: .verificationFailed)
        /// An installed tree no longer is of the kind it was installed as: a tree installed from
        /// a signed manifest is now marked bare (its manifest signature removed).
        public static let relabelledTree = Code("relabelled-tree", exitStatus: .verificationFailed)
        /// A file has no signature.
        public static let missingSignature = Code("missing-signature", exitStatus: .verificationFailed)
        /// A signature does not verify with any of the given keys.
        public static let badSignature = Code("bad-signature", exitStatus: .verificationFailed)
        /// A signature is not exactly the key's modulus length.
        public static let wrongSignatureLength = Code("wrong-signature-length", exitStatus: .verificationFailed)
        /// A release other than the one confirmed (`--require-manifest-sha256`), even one
        /// correctly signed.
        public static let notConfirmed = Code("not-confirmed", exitStatus: .verificationFailed)

        // Exit 2: usage.
        /// The command line or the arguments to an API call are inconsistent.
        public static let usage = Code("usage", exitStatus: .usage)

        // Exit 3: untrusted.
        /// The signer is not among the trusted keys.
        public static let untrustedSigner = Code("untrusted-signer", exitStatus: .untrusted)

        /// A download's TLS server failed the TLS policy: chain, host name, pins, pinned
        /// certificates, or a redirect away from https://.
        public static let tlsRefused = Code("tls-refused", exitStatus: .untrusted)

        /// A trust directory no longer matches its seal.
        public static let brokenTrustSeal = Code("broken-trust-seal", exitStatus: .untrusted)

        /// An encrypted package is not sealed to the device's key (FORMAT.md §8).
        public static let notARecipient = Code("not-a-recipient", exitStatus: .untrusted)

        /// A release its transparency log does not hold as the device's policy asks: the log's
        /// signature, the witnesses' quorum, or the inclusion proof fails.
        public static let notLogged = Code("not-logged", exitStatus: .untrusted)

        // Exit 4: malformed input.
        /// A key file could not be parsed in any supported format.
        public static let malformedKey = Code("malformed-key", exitStatus: .malformed)
        /// The passphrase does not decrypt the private key.
        public static let wrongPassphrase = Code("wrong-passphrase", exitStatus: .malformed)
        /// The key is encrypted and no passphrase could be obtained.
        public static let passphraseRequired = Code("passphrase-required", exitStatus: .malformed)
        /// A passphrase or salt source was given explicitly but holds nothing.
        public static let emptyPassphrase = Code("empty-passphrase", exitStatus: .malformed)
        /// The key is not RSA (EC, Ed25519, DSA, ...).
        public static let unsupportedKeyType = Code("unsupported-key-type", exitStatus: .malformed)
        /// The RSA key is smaller than 2048 bits and no opt-in was given.
        public static let weakKey = Code("weak-key", exitStatus: .malformed)
        /// A public key or certificate was given where a private key is needed, or the reverse.
        public static let wrongKeyKind = Code("wrong-key-kind", exitStatus: .malformed)
        /// A PKCS#12 file needs OpenSSL's legacy provider, which is not installed.
        public static let legacyProviderMissing = Code("legacy-provider-missing", exitStatus: .malformed)
        /// A package manifest that is not signet/1 JSON.
        public static let malformedManifest = Code("malformed-manifest", exitStatus: .malformed)
        /// An archive that is corrupt, truncated, or has forbidden, duplicate or non-regular entries.
        public static let malformedArchive = Code("malformed-archive", exitStatus: .malformed)
        /// A download is larger than `--max-download-size`.
        public static let downloadTooLarge = Code("download-too-large", exitStatus: .malformed)
        /// A resource packed with `--structured` that does not parse as JSON or a property list.
        public static let malformedStructuredFile = Code("malformed-structured-file", exitStatus: .malformed)
        /// An input that should be data is not (empty, a directory, too large).
        public static let malformedInput = Code("malformed-input", exitStatus: .malformed)

        // Exit 5: environment.
        /// A file is missing.
        public static let fileNotFound = Code("file-not-found", exitStatus: .environment)
        /// Permission denied.
        public static let permissionDenied = Code("permission-denied", exitStatus: .environment)
        /// A file exists where Signet refuses to replace it.
        public static let fileExists = Code("file-exists", exitStatus: .environment)
        /// The install destination may not be replaced (not empty and not installed by Signet,
        /// a symbolic link, not a directory).
        public static let destinationRefused = Code("destination-refused", exitStatus: .environment)
        /// Another process is updating the same destination.
        public static let destinationBusy = Code("destination-busy", exitStatus: .environment)
        /// The process is being interrupted (SIGINT, SIGTERM): nothing more is written.
        public static let interrupted = Code("interrupted", exitStatus: .environment)
        /// A download failed on the network: DNS, connection, time-out, HTTP 4xx/5xx, a body cut short.
        public static let network = Code("network-error", exitStatus: .environment)
        /// The server sent the body with a `Content-Encoding` (gzip, br, …) although Signet
        /// asks for `identity`: the bytes are not the file; nothing was written.
        public static let contentEncoding = Code("content-encoding", exitStatus: .environment)
        /// A file that conveys trust (a configuration, trusted keys, a trust directory, TLS
        /// roots, a salt, the install state) could be changed by another user: owned by one,
        /// writable by group or others, or reached through such a folder.
        public static let insecureFile = Code("insecure-file", exitStatus: .environment)
        /// A package that is not the one its signed metadata (a TUF target) binds: manifest,
        /// name, sequence, size or SHA-256.
        public static let indexMismatch = Code("index-mismatch", exitStatus: .verificationFailed)
        /// The package on the server changed while it was read with range requests (twice in
        /// one update): nothing was installed; run again.
        public static let packageChanged = Code("package-changed", exitStatus: .environment)
        /// TUF metadata that is not well-formed (not strict JSON, a missing or mistyped field,
        /// another role's type, a key id listed twice).
        public static let malformedMetadata = Code("malformed-metadata", exitStatus: .malformed)
        /// TUF metadata without the threshold of valid signatures by the keys its delegating
        /// role names.
        public static let thresholdNotMet = Code("threshold-not-met", exitStatus: .untrusted)
        /// TUF metadata or a target that is not what trusted metadata binds: its version,
        /// length or hashes differ.
        public static let metadataMismatch = Code("metadata-mismatch", exitStatus: .verificationFailed)
        /// TUF metadata past its `expires`: the repository may be holding back updates (a
        /// freeze attack), or its online keys stopped re-signing.
        public static let expiredMetadata = Code("expired-metadata", exitStatus: .verificationFailed)
        /// No trusted targets role lists the target asked for.
        public static let targetNotFound = Code("target-not-found", exitStatus: .verificationFailed)
        /// The health check of a release that was just installed failed or timed out: the
        /// previous release was swapped back and the failed one recorded as bad.
        public static let healthCheckFailed = Code("health-check-failed", exitStatus: .verificationFailed)
        /// A release this destination refused before (a failed health check, a rollback, an
        /// unconfirmed release rolled back at boot): not installed again; a higher sequence is.
        public static let badRelease = Code("bad-release", exitStatus: .verificationFailed)
        /// `status DIR` of a directory that holds no release installed by Signet.
        public static let notInstalled = Code("not-installed", exitStatus: .verificationFailed)
        /// A rollback that cannot be made: no previous release is kept, or it no longer matches
        /// what was installed (a file shared with the current release was changed in place).
        /// DIR is unchanged.
        public static let rollbackRefused = Code("rollback-refused", exitStatus: .verificationFailed)
        /// `--verity` on a filesystem that does not take fs-verity files.
        public static let verityUnsupported = Code("verity-unsupported", exitStatus: .environment)
        /// The release was staged and verified, but not swapped in: outside the maintenance
        /// window, or the pre-install command said "not now" (exit 75). What was staged is kept
        /// for the next run. `signet update` reports it and exits 0.
        public static let installDeferred = Code("install-deferred", exitStatus: .environment)
        /// The pre-install command refused the release (an exit other than 0 and 75, a signal,
        /// a time-out): nothing was installed; the next run asks again.
        public static let preInstallRefused = Code("pre-install-refused", exitStatus: .verificationFailed)
        /// Any other I/O failure (no space, read error, ...).
        public static let io = Code("io-error", exitStatus: .environment)
        /// OpenSSL failed in a way that is not about the input (out of memory, RNG failure).
        public static let crypto = Code("crypto-failure", exitStatus: .environment)
    }

    /// Process exit status per FORMAT.md §4. Printed as its number and meaning:
    /// `"4 (malformed input)"`.
    public struct ExitStatus: Hashable, Sendable, CustomStringConvertible {
        /// The numeric status.
        public let rawValue: Int32
        /// Creates a status from its number.
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// 0: success or verified.
        public static let success = ExitStatus(rawValue: 0)
        /// 1: well-formed input that fails verification.
        public static let verificationFailed = ExitStatus(rawValue: 1)
        /// 2: usage error.
        public static let usage = ExitStatus(rawValue: 2)
        /// 3: untrusted signer.
        public static let untrusted = ExitStatus(rawValue: 3)
        /// 4: malformed input (keys, archives, manifests).
        public static let malformed = ExitStatus(rawValue: 4)
        /// 5: environment (I/O, permissions, space).
        public static let environment = ExitStatus(rawValue: 5)

        /// The number and what it means, as FORMAT.md §4 names it: `"3 (untrusted signer)"`.
        public var description: String {
            let meaning: String
            switch rawValue {
            case 0: meaning = "success"
            case 1: meaning = "verification failed"
            case 2: meaning = "usage error"
            case 3: meaning = "untrusted signer"
            case 4: meaning = "malformed input"
            case 5: meaning = "environment error"
            default: return String(rawValue)
            }
            return "\(rawValue) (\(meaning))"
        }
    }

    /// What kind of failure this is.
    public var code: Code
    /// A sentence for a person: what failed, on which file, and what to do next.
    public var reason: String
    /// The file concerned, if any.
    public var path: String?
    /// The archive entry concerned, if any.
    public var entry: String?
    /// OpenSSL's error queue at the time of the failure, oldest first ("lib: reason: data").
    public var openSSLErrors: [String]
    /// The system or library call that failed ("openat", "fsync", "EVP_DigestSignFinal"), when
    /// one did.
    public var call: String?
    /// The `errno` that call set, read right after it, when it set one.
    public var systemError: Int32?
    /// Where in Signet the error was raised (for bug reports).
    public var location: String

    /// Creates an error.
    public init(
        _ code: Code,
        _ reason: String,
        path: String? = nil,
        entry: String? = nil,
        openSSLErrors: [String] = [],
        call: String? = nil,
        systemError: Int32? = nil,
        fileID: StaticString = #fileID,
        line: UInt = #line
    ) {
        self.code = code
        self.reason = reason
        self.path = path
        self.entry = entry
        self.openSSLErrors = openSSLErrors
        self.call = call
        self.systemError = systemError
        self.location = "\(fileID):\(line)"
    }

    public static func == (lhs: SignetError, rhs: SignetError) -> Bool { lhs.code == rhs.code }

    /// The reason, followed by OpenSSL's own words when it had any, each said once (OpenSSL
    /// queues the same lines again when a decoder tries one format after another).
    public var description: String {
        if openSSLErrors.isEmpty { return reason }
        var seen = Set<String>()
        let once = openSSLErrors.filter { seen.insert($0).inserted }
        return reason + " (OpenSSL: " + once.joined(separator: "; ") + ")"
    }
}

extension SignetError {
    /// The refusal of Signet's one rule for outputs: `what` at `path` already exists
    /// and is replaced only with `--force` (``Code/fileExists``, exit 5).
    public static func existingOutput(_ path: String, what: String) -> SignetError {
        SignetError(.fileExists, "\(what) '\(path)' already exists; an existing output is replaced only with --force. Nothing was written", path: path)
    }
}
