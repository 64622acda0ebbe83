import ArgumentParser
import Foundation
import Signet

struct Fetch: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fetch",
        abstract: "Download one file over HTTPS, with the server's certificate pinned, resumable.",
        discussion: """
            The file is downloaded into .FILE.signet-download beside FILE (never into memory) and \
            renamed to FILE only when it is complete. A download cut short (a dropped link, kill -9, \
            a power cut) continues from the bytes on disk on the next run, with HTTP Range and \
            If-Range, so a file that changed on the server is downloaded anew.

            With --signature and a trust source (--pubkey, --trust-dir, --ca), the body is hashed as \
            it arrives and FILE appears only if the signature verifies; FILE then carries it in \
            user.signet.sig, as unpack does.

            TLS: the host name is always checked, TLS 1.2 or later. By default the system's CA \
            store; --tls-ca trusts only the given roots; --tls-pin requires a public key anywhere in \
            the verified chain (repeat it for backup pins); --tls-cert requires the exact server \
            certificate. Redirects: at most 5, to https:// only, each under the same policy. \
            Proxies: the https_proxy, HTTPS_PROXY and NO_PROXY variables, as curl reads them.

            Exit codes: 3 when the server fails the TLS policy (the message lists the sha256// pin of \
            every certificate it presented), 5 for network failures and HTTP errors, 4 for a body \
            over --max-download-size, 1 or 3 when --signature does not verify.

            Examples:
              signet fetch https://updates.example.com/app-1.4.2.zip --out app.zip \\
                --tls-pin sha256//BASE64
              signet fetch https://updates.example.com/fw.bin --out fw.bin \\
                --signature https://updates.example.com/fw.bin.sig \\
                --pubkey keys/public_key.der
            """
    )

    @Argument(help: ArgumentHelp("What to download.", valueName: "https-url"))
    var url: String

    @Option(name: .long, help: ArgumentHelp("Where to put it.", valueName: "file"))
    var out: String

    @Flag(name: .long, help: "Replace --out if it exists (without it, an existing file is refused before anything is downloaded).")
    var force = false

    @Option(name: .long, help: ArgumentHelp("Its detached signature: a file or an https:// URL (at most 64 KiB).", valueName: "file|url"))
    var signature: String?

    @Option(name: .long, help: "Signature algorithm of --signature.")
    var algorithm: SignatureAlgorithm = .default

    @OptionGroup var trust: TrustOptions

    @OptionGroup(title: "Downloads") var tls: TLSOptions

    @OptionGroup(title: "Events") var events: EventOptions
    @OptionGroup var output: OutputOptions

    func validate() throws {
        if signature != nil && !trust.hasSources { throw ValidationError("--signature needs a trust source: " + TrustOptions.missingSources) }
        if signature == nil && trust.hasSources { throw ValidationError("a trust source needs --signature (the file's detached signature)") }
        if !Download.isURL(url) { throw ValidationError("'\(url)' is not an https:// URL") }
    }

    struct Report: Encodable {
        let url: String
        let file: String
        let size: UInt64
        let resumed_from: UInt64
        let verified: Bool
    }

    func run() throws {
        try events.start()
        Signals.onInterrupt("nothing was written to '\(out)'; what arrived is kept beside it: run the same command again to resume")
        tls.warnIfInsecure(url)
        let options = try tls.options(trust: trust)
        // After the trust sources loaded (a broken seal is the first thing to hear about), before
        // anything is downloaded.
        if !force { try OutputFiles.refuseExisting(out, what: "the download's output") }
        var signatureBytes: [UInt8]? = nil
        var policy: TrustPolicy? = nil
        if let signature {
            policy = try trust.policy(sealedElsewhere: tls.sealsDirectories)
            if Download.isURL(signature) {
                var small = options
                small.maxSize = 64 * 1024
                let path = try Blocking.wait { [small] in try await Download.temporaryCopyAsync(of: signature, options: small) }
                defer { Download.removeTemporaryCopy(path) }
                signatureBytes = try SignatureFiles.read(path)
            } else {
                signatureBytes = try SignatureFiles.read(signature)
            }
        }
        let (url, out, algorithm, force) = (url, out, algorithm, force)
        Events.current?.phase(.download)
        let result = try ProgressLine.downloading(url, options: options, output: output) { [signatureBytes, policy] in
            try await Download.fileAsync(url, to: out, options: $0, signature: signatureBytes, algorithm: algorithm, policy: policy, replace: force)
        }
        Output.result(Report(url: url, file: out, size: result.size, resumed_from: result.resumedFrom, verified: signatureBytes != nil), json: output.json)
        if output.json { return }
        let resumed = result.resumedFrom > 0 ? " (continued from \(result.resumedFrom) bytes on disk)" : ""
        let verified = signatureBytes != nil ? ", signature verified" : ", not verified (no --signature)"
        Output.line("downloaded \(out): \(result.size) bytes\(resumed)\(verified)")
    }
}
