#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
public import SystemPackage
import SignetCore
import SignetCrypto
import SignetNetwork

// MARK: Swift-native forms: FilePath, URL and DataProtocol

extension TUFClientOptions {
    /// Options for the repository at `metadataURL`, trusted metadata in `metadataDirectory`.
    public init(metadataDirectory: FilePath, metadataURL: URL) {
        self.init(metadataDirectory: metadataDirectory.string, metadataURL: metadataURL.absoluteString)
    }
}

extension TUFClient {
    /// ``initialize(metadataDirectory:trustedRoot:force:)-(String,_,_)`` with a `FilePath` and any bytes.
    public static func initialize(metadataDirectory: FilePath, trustedRoot: some DataProtocol, force: Bool = false) throws {
        try initialize(metadataDirectory: metadataDirectory.string, trustedRoot: Array(trustedRoot), force: force)
    }

    /// ``download(_:from:into:)-(_,String,String)`` with a `URL` and a `FilePath`.
    public func download(_ target: TUFTarget, from baseURL: URL, into directory: FilePath) throws -> TUFDownload {
        try download(target, from: baseURL.absoluteString, into: directory.string)
    }

    /// ``downloadAsync(_:options:from:into:)-(_,_,String,String)`` with a `URL` and a `FilePath`.
    public static func downloadAsync(
        _ path: String, options: TUFClientOptions, from baseURL: URL,
        into directory: FilePath
    ) async throws -> TUFDownload {
        try await downloadAsync(path, options: options, from: baseURL.absoluteString, into: directory.string)
    }
}
