import ArgumentParser
import Foundation
import Signet
#if canImport(Glibc)
import Glibc
#endif

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify a raw signature over a file with trusted public keys.",
        discussion: """
            Exit 0 when the signature verifies with one of the --pubkey keys, 1 when it does not. \
            The signature is FILE.sig (what signet sign writes) unless --signature names another. \
            A signature must be exactly the key's modulus length: unlike openssl dgst -verify, \
            trailing bytes make it invalid. A package (.zip made by signet pack) is checked with \
            signet inspect or installed with signet unpack, not with verify.

            Examples:
              signet verify app.tar --pubkey keys/public_key.der
              signet verify app.tar --signature release/app.tar.sig \\
                --pubkey keys/public_key.der
            """
    )

    @Argument(help: ArgumentHelp("The signed file.", valueName: "file"))
    var file: String

    @Option(name: .long, help: ArgumentHelp("The signature file (raw bytes, as openssl dgst -sign writes); default: FILE.sig.", valueName: "sig"))
    var signature: String?

    @OptionGroup var trust: TrustOptions

    @Option(name: .long, help: "Signature algorithm the file was signed with.")
    var algorithm: SignatureAlgorithm = .default

    @OptionGroup var output: OutputOptions

    func validate() throws {
        if !trust.hasSources { throw ValidationError(TrustOptions.missingSources) }
    }

    /// Whether anything is at `path` (a dangling link counts: reading it then says why).
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// Whether `path` starts as a zip archive does (a local file header or an empty archive).
    static func isZip(_ path: String) -> Bool {
        // O_NONBLOCK: a FIFO given as the file must not hang the check.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return false }
        let file = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
        guard let magic = try? file.read(upToCount: 4).map(Array.init), magic.count == 4 else { return false }
        return magic == [0x50, 0x4B, 0x03, 0x04] || magic == [0x50, 0x4B, 0x05, 0x06]
    }

    struct Report: Encodable {
        let verdict: String
        let file: String
        let signature: String
        let algorithm: String
        @Null var key_id: String?
        @Null var key_source: String?
        @Null var channel: String?
        @Null var error: Output.ErrorBody?
    }

    func run() throws {
        // Keys from --tuf-metadata vouch only for the packages their roles list.
        let policy = try trust.policy().forRawSignatures
        if policy.keys.isEmpty, policy.certificateAuthorities.isEmpty {
            throw SignetError(
                .untrustedSigner,
                "the keys of --tuf-metadata vouch only for the packages their TUF roles list, each by its threshold (check those with signet inspect or unpack), never for a raw signature over a file: give the signer's key with --pubkey",
                path: file)
        }
        let verifier = Verifier(policy: policy)
        let signature = self.signature ?? file + ".sig"
        if self.signature == nil, !Self.exists(signature) {
            // A package has its signatures inside: say which command checks it.
            if Self.isZip(file) {
                throw SignetError(
                    .usage,
                    "'\(file)' is a zip archive with no '\(signature)' beside it; a package made by signet pack is checked with: signet inspect '\(file)' --pubkey KEY (or installed with signet unpack). verify checks a raw signature over one file",
                    path: file)
            }
            throw SignetError(
                .fileNotFound,
                "no signature for '\(file)': '\(signature)' (the default, what signet sign writes) does not exist; give the signature file with --signature SIG",
                path: signature)
        }
        let signatureBytes = try SignatureFiles.read(signature)
        let result = try verifier.verify(signature: signatureBytes, fileAt: file, algorithm: algorithm)
        let failure = result.error(path: file)
        if output.json {
            Output.json(
                Report(
                    verdict: result.isValid ? "valid" : "invalid", file: file, signature: signature,
                    algorithm: algorithm.id, key_id: result.signer?.keyID.hex,
                    key_source: result.signer?.source, channel: result.signer.flatMap { policy.channel(of: $0.keyID) },
                    error: failure.map(Output.errorBody)))
        }
        if let failure {
            if !output.json { Output.line("FAILED \(file)") }
            Output.error("\(file): \(failure.reason)")
            throw ExitCode(failure.code.exitStatus.rawValue)
        }
        if !output.json, let signer = result.signer {
            Output.line("OK \(file) (\(algorithm.id), key \(signer.keyID.short) from \(signer.source))")
        }
    }
}
