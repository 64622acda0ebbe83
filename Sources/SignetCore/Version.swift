internal import COpenSSL

/// Versions of Signet and the libraries it runs on, for `signet --version` and bug reports.
///
/// Each layer adds the library it links: libzip's version comes with `SignetArchive`, libcurl's
/// with `SignetNetwork`, so that a layer never loads a library to name it.
public enum SignetVersion {
    /// Signet's own version.
    public static let signet = "0.2.0"
    /// The OpenSSL library actually loaded at run time (may differ from the headers built against).
    public static var openSSL: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
}
