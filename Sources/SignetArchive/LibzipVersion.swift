internal import CZip
import SignetCore

extension SignetVersion {
    /// The libzip library loaded at run time.
    public static var libzip: String { String(cString: zip_libzip_version()) }
    /// One line: "0.2.0 (OpenSSL 3.0.x, libzip 1.x)".
    public static var summary: String { "\(signet) (\(openSSL), libzip \(libzip))" }
}
