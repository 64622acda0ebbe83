import Foundation
public import SystemPackage
import SignetCore
public import SignetCrypto
import SignetManifest
public import SignetNetwork

/// Downloads that verify a signature and label the file as unpack does: the network layer
/// fetches and verifies (`Download.fetch`); this layer, which knows Signet's attributes, writes
/// `user.signet.sig` and `user.signet.meta` (FORMAT.md §3) before the file appears.
extension Download {
    /// Downloads `url` to `path`: into `.NAME.signet-download` beside it (continued if an
    /// earlier call was cut short), fsynced, then renamed to `path`. When `signature` and
    /// `policy` are given, the body is hashed as it arrives and `path` appears only if the
    /// signature verifies; the file then carries it as `user.signet.sig`, as unpack does, and
    /// `user.signet.meta` records `url` as its `source`.
    public static func file(
        _ url: String, to path: String, options: DownloadOptions = DownloadOptions(),
        signature: [UInt8]? = nil, algorithm: SignatureAlgorithm = .default,
        policy: TrustPolicy? = nil, replace: Bool = true
    ) throws -> DownloadResult {
        try file(url, to: path, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace, cancelled: nil)
    }

    /// `file(_:to:options:signature:algorithm:policy:replace:)` on a thread of its own (not Swift
    /// concurrency's shared pool, which a blocking transfer would hold); cancelling the task
    /// stops the transfer, keeps what arrived for the next call, and throws `CancellationError`.
    /// Progress goes to ``/SignetNetwork/DownloadOptions/progress``.
    public static func fileAsync(
        _ url: String, to path: String, options: DownloadOptions = DownloadOptions(),
        signature: [UInt8]? = nil, algorithm: SignatureAlgorithm = .default,
        policy: TrustPolicy? = nil, replace: Bool = true
    ) async throws -> DownloadResult {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async {
                try file(url, to: path, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace, cancelled: cancelled)
            }
        } onCancel: {
            cancelled.set()
        }
    }

    /// The old name of ``fileAsync(_:to:options:signature:algorithm:policy:replace:)-(String,_,_,_,_,_,_)``.
    @available(
        *, deprecated, renamed: "fileAsync(_:to:options:signature:algorithm:policy:replace:)",
        message: "the async form has its own name, so that a blocking call is never chosen for `try await`"
    )
    public static func file(
        _ url: String, to path: String, options: DownloadOptions = DownloadOptions(),
        signature: [UInt8]? = nil, algorithm: SignatureAlgorithm = .default,
        policy: TrustPolicy? = nil, replace: Bool = true
    ) async throws -> DownloadResult {
        try await fileAsync(url, to: path, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace)
    }

    static func file(
        _ url: String, to path: String, options: DownloadOptions, signature: [UInt8]?,
        algorithm: SignatureAlgorithm, policy: TrustPolicy?, replace: Bool = true, cancelled: CancellationFlag?
    ) throws -> DownloadResult {
        try fetch(url, to: path, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace, cancelled: cancelled) {
            fd, key, digest in
            switch ExtendedAttributes.set(ExtendedAttributes.signature, signature ?? [], on: fd) {
            case .success:
                let meta = try SignetMetadata.encode(
                    path: String(path.split(separator: "/").last ?? ""), sha256: digest.hex, signer: key, manifest: nil,
                    algorithm: algorithm, source: recordedSource(url))
                _ = ExtendedAttributes.set(ExtendedAttributes.metadata, meta, on: fd)
            case .failure(let failure) where failure.isUnsupported: break
            case .failure(let failure): throw failure.error("set", attribute: ExtendedAttributes.signature, path: path)
            }
        }
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension Download {
    /// Downloads `url` to `path`, blocking (`file(_:to:options:signature:algorithm:policy:replace:)`).
    public static func file(
        _ url: URL, to path: FilePath, options: DownloadOptions = DownloadOptions(),
        signature: [UInt8]? = nil, algorithm: SignatureAlgorithm = .default,
        policy: TrustPolicy? = nil, replace: Bool = true
    ) throws -> DownloadResult {
        try file(url.absoluteString, to: path.string, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace)
    }

    /// Downloads `url` to `path` on a thread of its own; cancelling the task stops the transfer.
    public static func fileAsync(
        _ url: URL, to path: FilePath, options: DownloadOptions = DownloadOptions(),
        signature: [UInt8]? = nil, algorithm: SignatureAlgorithm = .default,
        policy: TrustPolicy? = nil, replace: Bool = true
    ) async throws -> DownloadResult {
        try await fileAsync(url.absoluteString, to: path.string, options: options, signature: signature, algorithm: algorithm, policy: policy, replace: replace)
    }
}
