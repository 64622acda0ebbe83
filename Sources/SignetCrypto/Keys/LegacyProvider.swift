public import SystemPackage
import Foundation
internal import COpenSSL
internal import CSignetOpenSSL
import Synchronization
import SignetCore

/// OpenSSL's legacy provider (RC2, RC4, DES, ...) lives in its own library context, created
/// the first time a file needs it. The process-wide default context never gets it, so legacy
/// algorithms are only ever used to read such a file, and detecting one does not depend on
/// what was read before.
enum LegacyProvider {
    final class Context: @unchecked Sendable {
        let pointer: OpaquePointer
        init(_ pointer: OpaquePointer) { self.pointer = pointer }
        // Never freed: keys and certificates decoded in it may reference its providers.
    }

    private static let shared = Mutex<Context?>(nil)

    /// Runs `body` with the legacy context as this thread's default library context.
    static func withContext<R>(for name: String, after errors: [String], _ body: () throws -> R) throws -> R {
        let context = try obtain(for: name, after: errors)
        let previous = OSSL_LIB_CTX_set0_default(context.pointer)
        defer { OSSL_LIB_CTX_set0_default(previous) }
        return try body()
    }

    private static func obtain(for name: String, after errors: [String]) throws -> Context {
        try shared.withLock { existing in
            if let existing { return existing }
            OpenSSLErrorQueue.clear()
            guard let pointer = OSSL_LIB_CTX_new() else {
                throw OpenSSLErrorQueue.error(.crypto, "could not create an OpenSSL library context")
            }
            guard let defaultProvider = OSSL_PROVIDER_load(pointer, "default") else {
                OSSL_LIB_CTX_free(pointer)
                throw OpenSSLErrorQueue.error(.crypto, "could not load OpenSSL's default provider")
            }
            guard OSSL_PROVIDER_load(pointer, "legacy") != nil else {
                let details = OpenSSLErrorQueue.drain().map(\.text)
                OSSL_PROVIDER_unload(defaultProvider)
                OSSL_LIB_CTX_free(pointer)
                throw SignetError(
                    .legacyProviderMissing,
                    "PKCS#12 file '\(name)' uses legacy encryption (RC2-40/3DES), which needs OpenSSL's legacy provider (legacy.so, in Debian's libssl3), and it is not installed here; install it, or re-export the file on another machine with: openssl pkcs12 -export (without -legacy)",
                    path: name, openSSLErrors: errors + details)
            }
            // Both providers stay loaded for the life of the process, with the context.
            let context = Context(pointer)
            existing = context
            return context
        }
    }
}
