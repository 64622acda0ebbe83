import ArgumentParser
import Foundation
import Signet

struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "inspect",
        abstract: "Show what a package holds and, with --pubkey, whether it verifies. Extracts nothing.",
        discussion: """
            Without --pubkey the manifest is shown as stored, NOT verified. With --pubkey every \
            check unpack makes is made, streaming each entry: manifest signature, expiry, the exact \
            set of files, and each file's size, SHA-256 and signature.

            An https:// URL is read with HTTP range requests over one connection (each pinned to \
            the first answer with If-Range): the package is never stored on the device. A server \
            that does not answer ranges, or --full-download, gets the whole package downloaded \
            into a private temporary folder, removed afterwards.

            Exit 0 if the package verifies (or, without keys, is well-formed), 1 if it fails \
            verification, 3 if its signer is not trusted, 4 if it is malformed.

            Example:
              signet inspect app-1.4.2.zip --pubkey keys/public_key.der
            """
    )

    @Argument(
        help: ArgumentHelp(
            "The package: a file, or an https:// URL (read with range requests, or downloaded to a private temporary folder and removed).",
            valueName: "pkg.zip|url"))
    var package: String

    @Flag(name: .customLong("full-download"), help: "For a URL: download the whole package first instead of reading it with range requests.")
    var fullDownload = false

    @OptionGroup var trust: TrustOptions

    @OptionGroup(title: "Downloads") var tls: TLSOptions

    @Flag(name: .long, help: "The package is the older bare layout (FILE + FILE.sig, no manifest), as unpack --bare takes.")
    var bare = false

    @Option(name: .long, help: "Signature algorithm of a --bare package.")
    var algorithm: SignatureAlgorithm = .default

    @OptionGroup var limits: LimitOptions

    @OptionGroup var output: OutputOptions

    struct BareReport: Encodable {
        struct File: Encodable {
            let path: String
            let size: UInt64
            let compressed_size: UInt64
            let compression: String
            let signed: Bool
        }
        let package: String
        let bare = true
        let algorithm: String
        let files: [File]
        let verdict: String
        let verified: Bool
        @Null var signer: String?
        @Null var error: Output.ErrorBody?
    }

    /// `--bare`: the files and whether each has a signature; with keys, each signature checked.
    private func inspectBare(_ file: String) throws {
        let package = try BarePackage(contentsOf: file, limits: limits.limits)
        var signer: PublicKey? = nil
        var failure: SignetError? = nil
        if trust.hasSources {
            let policy = try trust.policy(sealedElsewhere: tls.sealsDirectories)
            do {
                signer = try ProgressLine.showing("verifying " + file, output: output) {
                    try package.verify(policy: policy, algorithm: algorithm, limits: limits.limits, progress: $0)
                }
            } catch let error as SignetError where [1, 3].contains(error.code.exitStatus.rawValue) {
                failure = error
            }
        }
        let verdict = !trust.hasSources ? "not-checked" : signer != nil ? "valid" : failure?.code == .untrustedSigner ? "untrusted" : "invalid"
        if output.json {
            Output.json(
                BareReport(
                    package: self.package, algorithm: algorithm.id,
                    files: package.files.map {
                        .init(path: $0.path, size: $0.size, compressed_size: $0.compressedSize, compression: $0.compression.rawValue, signed: $0.hasSignature)
                    }, verdict: verdict, verified: signer != nil, signer: signer?.keyID.hex, error: failure.map(Output.errorBody)))
        } else {
            Output.lines([
                "package:   \(self.package) (bare: FILE + FILE.sig, no manifest; no completeness, rollback or expiry check)",
                "algorithm: \(algorithm.id)",
                "files:     \(package.files.count)"
            ])
            for entry in package.files {
                Output.line(
                    "  \(String(entry.size).leftPadded(12))  \(String(entry.compressedSize).leftPadded(12))  \(entry.compression.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0))  \(entry.hasSignature ? "signed  " : "UNSIGNED")  \(entry.path)"
                )
            }
            if let signer {
                Output.line("verified:  yes — every file's signature verifies with key \(signer.keyID.short)")
            } else if trust.hasSources {
                Output.line("verified:  NO")
            } else {
                Output.line("verified:  not checked (pass --pubkey to verify each file's signature)")
            }
        }
        if let failure {
            Output.error(failure.reason)
            throw ExitCode(failure.code.exitStatus.rawValue)
        }
        if !trust.hasSources, let unsigned = package.files.first(where: { !$0.hasSignature }) {
            Output.error("'\(unsigned.path)' has no signature '\(unsigned.path).sig' in the bare package '\(self.package)'; unpack --bare would refuse it")
            throw ExitCode(1)
        }
    }

    @OptionGroup(title: "Encrypted packages") var decryption: DecryptionOptions

    func run() throws {
        let verification: PackageVerification?
        let contents: PackageContents
        var channel: String? = nil
        var file = package
        let remote = Download.isURL(package)
        if remote {
            tls.warnIfInsecure(package)
        }
        // Ranges where they can be used: a bare package is read from a copy.
        if remote && (bare || fullDownload) {
            let package = package
            file = try ProgressLine.downloading(package, options: try tls.options(trust: trust), output: output) {
                try await Download.temporaryCopyAsync(of: package, options: $0)
            }
        }
        defer { if file != package { Download.removeTemporaryCopy(file) } }
        if bare { return try inspectBare(file) }
        // An encrypted package: what it says of itself, then (with the device's key) what it
        // holds, read in place.
        var key: DecryptionKey? = nil
        if !remote, EncryptedPackage.isEncrypted(file) {
            let summary = try EncryptedPackage.summary(of: file)
            key = try decryption.load()
            if key == nil {
                Output.line(
                    "\(file): an encrypted package (\(summary.envelope)), sealed to \(summary.recipients.count) device\(summary.recipients.count == 1 ? "" : "s"); \(summary.packageSize) bytes inside"
                )
                for recipient in summary.recipients.prefix(20) { Output.line("  \(recipient)") }
                if summary.recipients.count > 20 { Output.line("  ... and \(summary.recipients.count - 20) more") }
                if trust.hasSources {
                    throw SignetError(.notARecipient, "'\(file)' is encrypted: give a device's key with --decryption-key to verify what it holds", path: file)
                }
                return
            }
        }
        let ranged = remote && file == package
        let download = ranged ? try tls.options(trust: trust) : DownloadOptions()
        if !trust.hasSources {
            verification = nil
            if let key {
                contents = try PackageReader.contents(of: file, decryptionKey: key, limits: limits.limits)
            } else {
                contents =
                    ranged
                    ? try PackageReader.contents(downloading: file, download: download, limits: limits.limits)
                    : try PackageReader.contents(of: file, limits: limits.limits)
            }
        } else {
            let policy = try trust.policy(sealedElsewhere: tls.sealsDirectories)
            let result = try ProgressLine.showing("verifying " + file, output: output) { progress in
                if let key { return try PackageReader.verify(file, decryptionKey: key, policy: policy, limits: limits.limits, progress: progress) }
                return ranged
                    ? try PackageReader.verify(downloading: file, policy: policy, download: download, limits: limits.limits, progress: progress)
                    : try PackageReader.verify(file, policy: policy, limits: limits.limits, progress: progress)
            }
            channel = result.signer.flatMap { policy.channel(of: $0.keyID) }
            verification = result
            contents = result.contents
        }
        let manifest = contents.manifest
        let stored = contents.resources
        let failure = verification.flatMap { result in
            result.failure.map { failure in
                SignetError(SignetError.Code(failure), result.message, path: package, entry: result.entry)
            }
        }
        let verdict = verification.map { $0.isValid ? "valid" : ($0.failure == .untrustedSigner ? "untrusted" : "invalid") } ?? "not-checked"
        if output.json {
            var report = PackageReport(
                package: package, manifest: manifest,
                storage: { stored.named($0).map { (compression: $0.compression, compressedSize: $0.compressedSize) } })
            report.verdict = verdict
            report.verified = verification?.isValid ?? false
            report.signer = verification?.signer?.keyID.hex
            report.channel = channel
            report.error = failure.map(Output.errorBody)
            Output.json(report)
        } else {
            Output.lines([
                "package:   \(package)",
                "name:      \(manifest.name)",
                "version:   \(manifest.version)",
                "sequence:  \(manifest.sequence)",
                "created:   \(manifest.created)",
                "expires:   \(manifest.expires?.rfc3339 ?? "never")",
                "algorithm: \(manifest.algorithm.id)",
                "key id:    \(manifest.keyID.hex)",
                "files:     \(manifest.files.count)"
            ])
            for file in manifest.files {
                let entry = stored.named(file.path)
                Output.line(
                    "  \(file.mode.rawValue)  \(String(file.size).leftPadded(12))  \(String(entry?.compressedSize ?? 0).leftPadded(12))  \(((entry?.compression.rawValue ?? "missing") + (file.isChunked ? ", chunked" : "")).padding(toLength: 17, withPad: " ", startingAt: 0))  \(file.sha256.prefix(16))  \(file.path)"
                )
            }
            if let verification {
                Output.line(verification.isValid ? "verified:  yes — \(verification.message)" : "verified:  NO")
            } else {
                Output.line("verified:  not checked (the manifest above is as stored; pass --pubkey to verify)")
            }
        }
        if let failure {
            Output.error("\(package): \(failure.reason)")
            throw ExitCode(failure.code.exitStatus.rawValue)
        }
    }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
